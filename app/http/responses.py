"""How the service's answers are written: JSON through Flask's provider hook, and the
bodiless answers views share."""

from __future__ import annotations

from typing import Any

import orjson
from flask import Response
from flask.json.provider import DefaultJSONProvider
from werkzeug.sansio.response import Response as BaseResponse

#: orjson hands these to ``default`` (which refuses them) rather than write them its way.
ORJSON_OPTIONS = (
    orjson.OPT_APPEND_NEWLINE
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


class JSONProvider(DefaultJSONProvider):
    """Flask's JSON provider, its answers written by orjson where the bytes come out the
    same: compact, keys in the order built, escaped to ASCII, one newline.

    Where orjson would write other bytes, Flask's own ``response`` writes the answer: any
    float (the two spell some differently), text outside printable ASCII (escaped by
    Flask, raw UTF-8 from orjson), integers beyond 64 bits, keys that are not strings,
    and any type orjson writes its own way.
    """

    sort_keys = False

    def response(self, *args: Any, **kwargs: Any) -> BaseResponse:
        if len(args) == 1 and not kwargs and not (self.compact is False or self._app.debug):
            body = _ascii_json(args[0])
            if body is not None:
                return Response(body, mimetype=self.mimetype)
        return super().response(*args, **kwargs)


def _ascii_json(value: Any) -> bytes | None:
    if _has_float(value):
        return None
    try:
        body = orjson.dumps(value, default=_refuse, option=ORJSON_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError: a type or an integer it leaves to Flask
        return None
    return body if body.isascii() and b"\x7f" not in body else None


def _has_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_has_float(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_has_float(item) for item in value)
    return False


def _refuse(value: Any) -> Any:
    raise TypeError(type(value).__name__)


def bodiless(status: int, **headers: str) -> Response:
    """Return a response with no body, hence no Content-Type (204, or a bare redirect)."""
    response = Response(status=status, headers=headers)
    del response.headers["Content-Type"]
    return response
