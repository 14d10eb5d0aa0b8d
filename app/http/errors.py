"""Every error response of the service, rendered in one place.

401 is the plain-text ``Unauthorized`` of SPEC.md, 403 is ``{"message": "No
access"}``, and every other error is JSON ``{"message": ...}``: never HTML,
never a stack trace.
"""

from __future__ import annotations

import os
from collections import deque
from traceback import walk_tb

from flask import Flask, Response, current_app, jsonify
from werkzeug.exceptions import (
    HTTPException,
    InternalServerError,
    ServiceUnavailable,
)
from werkzeug.wrappers import Response as WSGIResponse

from app.backends.interface import BackendUnavailable
from app.config.settings import MAX_BODY_BYTES
from app.http.request_log import note

#: Messages for errors raised without a description of ours, where werkzeug's name for
#: the status (lower-cased: "not found", "method not allowed"...) would say too little.
DEFAULT_MESSAGES = {
    413: f"request body is larger than {MAX_BODY_BYTES} bytes",
    415: "request body must be application/json or application/x-www-form-urlencoded",
}


#: The innermost frames an unexpected error's log line names, and how much of its message
#: and of each name it keeps: the line stays under 2 KB however deep the stack or long
#: the message (a RecursionError's traceback runs far longer).
ERROR_FRAMES = 5
MAX_ERROR_MESSAGE = 256
MAX_FRAME_NAME = 80


#: The 401 body and type of SPEC.md: exactly "text/plain" (the body is ASCII).
UNAUTHORIZED_BODY, UNAUTHORIZED_TYPE = b"Unauthorized", "text/plain"
#: The 403 body of SPEC.md, as jsonify writes it.
FORBIDDEN_BODY = b'{"message":"No access"}\n'


def unauthenticated_response() -> Response:
    """Return the 401 of a protected endpoint, which names the Bearer scheme.

    Returned, not raised: the protected endpoints answer their 401 and 403 many
    times a second, and Flask's exception handling costs more than the response
    itself. The bytes and headers are those ``render_http_error`` gives
    ``Unauthorized(www_authenticate=WWWAuthenticate("bearer"))``.
    """
    return Response(
        UNAUTHORIZED_BODY,
        401,
        [("Content-Type", UNAUTHORIZED_TYPE), ("WWW-Authenticate", "Bearer")],
    )


def forbidden_response() -> Response:
    """Return the 403 ``{"message":"No access"}`` as ``render_http_error`` renders it."""
    return Response(FORBIDDEN_BODY, 403, content_type="application/json")


def render_http_error(error: HTTPException) -> WSGIResponse:
    """Turn an HTTP error into the response the contract requires."""
    if error.code is None or error.code < 400:
        return error.get_response()  # a redirect or similar (werkzeug's), not an error
    if error.code == 401:
        response = Response(UNAUTHORIZED_BODY, 401, content_type=UNAUTHORIZED_TYPE)
    elif error.code == 403:
        response = forbidden_response()
    else:
        if error.description == type(error).description:
            message = DEFAULT_MESSAGES.get(error.code, error.name.lower())
        else:
            message = str(error.description)
        response = jsonify(message=message)
        response.status_code = error.code
    for name, value in error.get_headers():
        if name.lower() != "content-type":
            response.headers.add(name, value)
    return response


def render_store_unavailable(error: BackendUnavailable) -> WSGIResponse:
    """Answer 503 when the refresh-token store cannot be reached: a retry may succeed."""
    current_app.logger.warning("refresh-token store unavailable: %s", error)
    note(store_error="1")
    return render_http_error(
        ServiceUnavailable("token store is unavailable, try again shortly", retry_after=1)
    )


def render_unexpected_error(error: Exception) -> WSGIResponse:
    """Log a bug in one bounded line and answer a bare 500: fail closed, show nothing."""
    current_app.logger.error("unhandled error: %s", error_summary(error))
    return render_http_error(InternalServerError())


def error_summary(error: BaseException) -> str:
    """Return one line of at most 2 KB: the error's type, its message cut short, and its
    innermost frames (``file:line function``), innermost first."""
    try:
        message = str(error)
    except Exception:  # a __str__ that fails itself
        message = "?"
    # repr escapes control characters and line breaks: the summary is one line
    shown = repr(message[:MAX_ERROR_MESSAGE])[:MAX_ERROR_MESSAGE]
    frames = deque(walk_tb(error.__traceback__), maxlen=ERROR_FRAMES)
    where = " < ".join(
        f"{_short(frame.f_code.co_filename)}:{line} {_short(frame.f_code.co_name)}"
        for frame, line in reversed(frames)
    )
    kind = type(error).__qualname__
    if type(error).__module__ != "builtins":
        kind = f"{type(error).__module__}.{kind}"
    return f"{_short(kind)}: {shown} at {where or '?'}"


def _short(name: str) -> str:
    """Return a file name as its last two parts, and any name cut to MAX_FRAME_NAME."""
    parts = name.split(os.sep)
    return os.sep.join(parts[-2:])[-MAX_FRAME_NAME:]


def register_error_handlers(app: Flask) -> None:
    """Route every error the app can raise to its renderer."""
    app.register_error_handler(HTTPException, render_http_error)
    app.register_error_handler(BackendUnavailable, render_store_unavailable)
    app.register_error_handler(Exception, render_unexpected_error)
