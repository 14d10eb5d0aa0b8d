"""Read and check request bodies: JSON objects or URL-encoded forms, nothing else."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from flask import request
from werkzeug.exceptions import BadRequest, UnsupportedMediaType

FORM = "application/x-www-form-urlencoded"
#: A number as a form field may spell it: optional minus, digits, optional fraction.
DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?")


def read_fields() -> dict[str, Any]:
    """Return the request body's fields from JSON or a URL-encoded form; 400/413/415 if not."""
    mimetype = request.mimetype
    if mimetype == "application/json" or mimetype.endswith("+json"):
        return _json_object(request.get_data(cache=False))
    if mimetype == FORM:
        return _form_fields()
    if request.content_length == 0 or not request.get_data(cache=False):
        return {}  # no body at all: each missing field is reported on its own
    raise UnsupportedMediaType()


def required_string(fields: dict[str, Any], name: str, max_length: int | None = None) -> str:
    """Return the non-empty string field ``name``, or 400."""
    value = fields.get(name)
    if value is None:
        raise BadRequest(f"{name} is required")
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be a string")
    if not value:
        raise BadRequest(f"{name} must not be empty")
    _check_unicode(name, value)
    if max_length is not None and len(value) > max_length:
        raise BadRequest(f"{name} must be at most {max_length} characters")
    return value


def optional_string(fields: dict[str, Any], name: str) -> str | None:
    """Return the string field ``name`` if present, or 400 if it is not a string."""
    value = fields.get(name)
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"{name} must be a string")
    if value is not None:
        _check_unicode(name, value)
    return value


def required_number(fields: dict[str, Any], name: str) -> int | float:
    """Return the finite number field ``name`` (a decimal string in a form), or 400."""
    value = fields.get(name)
    if value is None:
        raise BadRequest(f"{name} is required")
    if isinstance(value, str) and request.mimetype == FORM:
        value = _decimal(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest(f"{name} must be a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise BadRequest(f"{name} must be a finite number")
    return value


def _check_unicode(name: str, value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, which JSON's \u escapes can spell
        raise BadRequest(f"{name} must be valid Unicode") from None


def _json_object(data: bytes) -> dict[str, Any]:
    try:
        body = json.loads(data, object_pairs_hook=_unique_keys, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        raise BadRequest("request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    body = dict(pairs)
    if len(body) != len(pairs):
        raise ValueError("duplicate key")
    return body


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _form_fields() -> dict[str, Any]:
    form = request.form
    fields: dict[str, Any] = {}
    for name in form:
        values = form.getlist(name)
        if len(values) > 1:
            raise BadRequest(f"{name} must be given once")
        fields[name] = values[0]
    return fields


def _decimal(text: str) -> int | float | str:
    if not DECIMAL.fullmatch(text):
        return text  # reported as "must be a number" by the caller
    try:
        return float(text) if "." in text else int(text)
    except ValueError:  # more digits than Python converts
        raise BadRequest("number has too many digits") from None
