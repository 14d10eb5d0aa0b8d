"""Read and check request bodies: JSON objects or URL-encoded forms, nothing else."""

from __future__ import annotations

import json
import math
import re
from typing import Any
from urllib.parse import parse_qsl

import orjson
from flask import request
from werkzeug.exceptions import (
    BadRequest,
    HTTPException,
    RequestEntityTooLarge,
    UnsupportedMediaType,
)

from app.auth.json_text import DuplicateKeyError, may_repeat_a_key, unique_keys
from app.config.settings import MAX_BODY_BYTES

FORM = "application/x-www-form-urlencoded"
#: Content-Types that are exactly their mimetype, as clients mostly send them.
PLAIN_TYPES = frozenset({FORM, "application/json"})
#: More fields than any endpoint has, by far; a form with more is refused.
MAX_FORM_FIELDS = 32
#: Integers that a JavaScript client reads back exactly.
MAX_SAFE_INTEGER = 2**53 - 1
#: A number as a form field may spell it: optional minus, digits, optional fraction.
DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?")
#: Deepest nesting of objects and arrays in a JSON body (the body itself is level 1). No
#: endpoint reads past level 1; a deeper document only costs its parsers' stacks.
MAX_JSON_DEPTH = 32
#: Every byte but the four brackets: deleted before the depth is read.
NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
#: Each opening bracket becomes "(", each closing one ")".
BRACKETS = bytes.maketrans(b"[]{}", b"()()")
#: Openers in a row beyond the limit: the usual deep document, found in one pass.
TOO_MANY_OPENERS = b"(" * (MAX_JSON_DEPTH + 1)


def read_fields() -> dict[str, Any]:
    """Return the request body's fields from JSON or a URL-encoded form; 400/413/415 if not."""
    environ = request.environ  # once: each use of the request proxy is a lookup
    if environ.get("HTTP_CONTENT_ENCODING", "identity").strip().lower() != "identity":
        raise UnsupportedMediaType("request body must not be compressed")
    data = _body(environ)
    content_type = environ.get("CONTENT_TYPE")
    # the two usual types, exactly as sent, are their own mimetype: no parsing
    mimetype = content_type if content_type in PLAIN_TYPES else request.mimetype
    if mimetype == "application/json" or mimetype.endswith("+json"):
        return _json_object(data)
    if mimetype == FORM:
        return _form_fields(data)
    if not data:
        return {}  # no body at all: each missing field is reported on its own
    raise UnsupportedMediaType()


def required_string(fields: dict[str, Any], name: str, max_length: int | None = None) -> str:
    """Return the non-empty string field ``name``, or 400."""
    value = fields.get(name)
    if value is None:
        raise missing(fields, name)
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be a string")
    if not value:
        raise BadRequest(f"{name} must not be empty")
    _check_unicode(name, value)
    if max_length is not None and len(value) > max_length:
        raise BadRequest(f"{name} must be at most {max_length} characters")
    return value


def optional_string(fields: dict[str, Any], name: str) -> str | None:
    """Return the string field ``name``, None if absent, or 400 if it is not a string."""
    if name not in fields:
        return None
    value = fields[name]
    if not isinstance(value, str):  # null too: an optional field is left out, not null
        raise BadRequest(f"{name} must be a string")
    _check_unicode(name, value)
    return value


def required_number(fields: dict[str, Any], name: str) -> int | float:
    """Return the finite number field ``name`` (a decimal string in a form), or 400."""
    value = fields.get(name)
    if value is None:
        raise missing(fields, name)
    if isinstance(value, str) and request.mimetype == FORM:
        value = _decimal(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest(f"{name} must be a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise BadRequest(f"{name} must be a finite number")
    if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_SAFE_INTEGER:
        return int(value)  # echoed as a JavaScript client wrote it: 1e3 and 4.0 are 1000 and 4
    return value


def missing(fields: dict[str, Any], name: str) -> BadRequest:
    """Return the 400 for a missing field, with a hint when a form body was JSON."""
    if request.mimetype == FORM and _looks_like_json(fields):
        return BadRequest(
            f"{name} is required (the body looks like JSON: send it with "
            "Content-Type: application/json; curl -d sends a form)"
        )
    return BadRequest(f"{name} is required")


def _looks_like_json(fields: dict[str, Any]) -> bool:
    # curl -d '{"username": "a"}' without a JSON Content-Type arrives as a form whose one
    # field name is the whole JSON text, with an empty value.
    return any(name.lstrip().startswith(("{", "[")) for name in fields)


def _content_length(environ: dict[str, Any]) -> int | None:
    """Return ``request.content_length``: the plain case read directly, werkzeug's otherwise."""
    given = environ.get("CONTENT_LENGTH")
    if given and given.isdigit() and given.isascii() and "HTTP_TRANSFER_ENCODING" not in environ:
        return int(given)  # what werkzeug makes of digits alone, without its calls
    return request.content_length


def _body(environ: dict[str, Any]) -> bytes:
    """Return the raw body: at most MAX_BODY_BYTES (else 413), well framed (else 400)."""
    length = _content_length(environ)
    if length is not None and length > MAX_BODY_BYTES:
        raise RequestEntityTooLarge()
    try:
        if length is not None:
            # read once, straight from the server: werkzeug's get_data wraps the input
            # in a limited stream first, which costs more than this whole read
            return environ["wsgi.input"].read(length) if length else b""
        if "wsgi.input_terminated" not in environ:
            return b""  # neither a length nor a framing server: nothing is safe to read
        # Chunked: read past the limit by one byte, so an oversized body is seen, not cut.
        data: bytes = environ["wsgi.input"].read(MAX_BODY_BYTES + 1)
    except HTTPException:
        raise
    except Exception as error:  # the server's chunk parser (gunicorn: InvalidChunkSize ...)
        raise BadRequest("request body is malformed") from error
    if len(data) > MAX_BODY_BYTES:
        raise RequestEntityTooLarge()
    return data


def _check_unicode(name: str, value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, which JSON's \u escapes can spell
        raise BadRequest(f"{name} must be valid Unicode") from None


def _json_object(data: bytes) -> dict[str, Any]:
    # Each level of nesting opens with a bracket (in any encoding json.loads reads, the
    # bracket's byte is there), so a body with no more brackets than levels allowed is
    # never too deep: an ordinary body pays two counts, no scan.
    text = None
    if data.count(b"{") + data.count(b"[") > MAX_JSON_DEPTH:
        text = _json_text(data)
        if _nested_too_deep(text):
            raise BadRequest(f"request body is nested deeper than {MAX_JSON_DEPTH} levels")
    body = _plain_json_object(data)
    if body is not None:
        return body
    try:
        body = json.loads(
            _json_text(data) if text is None else text,
            object_pairs_hook=unique_keys,
            parse_constant=_refuse_constant,
        )
    except DuplicateKeyError as error:
        raise BadRequest(f"duplicate key: {error.key}") from None
    except (ValueError, RecursionError):  # no RecursionError within MAX_JSON_DEPTH; kept as 400
        raise BadRequest("request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


def _json_text(data: bytes) -> str:
    """Return the body as text, decoded as ``json.loads`` decodes bytes (UTF-8, -16 or -32)."""
    try:
        return data.decode(json.detect_encoding(data), "surrogatepass")
    except UnicodeDecodeError:
        raise BadRequest("request body is not valid JSON") from None


def _nested_too_deep(text: str) -> bool:
    """Return whether a JSON text nests objects and arrays deeper than MAX_JSON_DEPTH.

    Read without recursion, in C-speed passes: the strings are cut out (escapes first,
    then every other piece between quotes), the brackets kept, and the innermost
    empty pairs removed, round after round; a document of depth D is gone after
    exactly D rounds. A text that is not JSON only gets one 400 rather than another.
    """
    plain = text.replace("\\\\", "").replace('\\"', "")
    outside = "".join(plain.split('"')[::2])
    brackets = outside.encode("utf-8", "surrogatepass").translate(BRACKETS, NOT_BRACKETS)
    for _ in range(MAX_JSON_DEPTH):
        if TOO_MANY_OPENERS in brackets:
            return True
        inner = brackets.replace(b"()", b"")
        if len(inner) == len(brackets):  # no pair left: what remains is ")))((("
            return brackets.count(b"(") > MAX_JSON_DEPTH
        brackets = inner
    return bool(brackets)


def _plain_json_object(data: bytes) -> dict[str, Any] | None:
    """Return what the standard parser below would, through orjson, or None if unsure.

    orjson is faster, and stricter (no NaN, UTF-8 only, no lone
    surrogate), so whatever it refuses goes to the standard parser, which says what
    is wrong. Two things it accepts differently are checked here: it keeps the last
    of duplicate keys silently, and it reads integers beyond 64 bits as floats.
    """
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if type(body) is not dict:
        return None
    if may_repeat_a_key(data, body):
        return None  # the standard parser finds which key came twice
    if any(type(value) is float for value in body.values()):
        return None  # maybe an integer orjson rounded: the standard parser keeps it exact
    return body


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _form_fields(data: bytes) -> dict[str, Any]:
    try:
        # strict UTF-8, raw and percent-decoded alike: no silent replacement characters
        text = data.decode("utf-8")
        if "%" in text or "+" in text or text.count("&") >= MAX_FORM_FIELDS:
            pairs = parse_qsl(
                text, keep_blank_values=True, errors="strict", max_num_fields=MAX_FORM_FIELDS
            )
        else:  # nothing to decode: parse_qsl's pairs, split here in a third of its time
            pairs = [_plain_pair(part) for part in text.split("&") if part]
    except UnicodeDecodeError:
        raise BadRequest("form body is not valid UTF-8") from None
    except ValueError:
        raise BadRequest(f"form body has more than {MAX_FORM_FIELDS} fields") from None
    fields: dict[str, Any] = {}
    for name, value in pairs:
        if name in fields:
            raise BadRequest(f"{name} must be given once")
        fields[name] = value
    return fields


def _plain_pair(part: str) -> tuple[str, str]:
    """Return a form field without escapes as parse_qsl does: a name alone has ""."""
    name, _, value = part.partition("=")
    return name, value


def _decimal(text: str) -> int | float | str:
    if not DECIMAL.fullmatch(text):
        return text  # reported as "must be a number" by the caller
    try:
        return float(text) if "." in text else int(text)
    except ValueError:  # more digits than Python converts
        raise BadRequest("number has too many digits") from None
