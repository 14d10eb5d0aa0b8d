"""Every error response of the service, rendered in one place.

401 is the plain-text ``Unauthorized`` of SPEC.md, 403 is ``{"message": "No
access"}``, and every other error is JSON ``{"message": ...}``: never HTML,
never a stack trace.
"""

from __future__ import annotations

from flask import Flask, Response, current_app, jsonify
from werkzeug.datastructures import WWWAuthenticate
from werkzeug.exceptions import (
    HTTPException,
    InternalServerError,
    ServiceUnavailable,
    Unauthorized,
)

from app.config import MAX_BODY_BYTES
from app.store import StoreUnavailableError

#: Messages for errors raised without a description of ours, where werkzeug's name for
#: the status (lower-cased: "not found", "method not allowed"...) would say too little.
DEFAULT_MESSAGES = {
    413: f"request body is larger than {MAX_BODY_BYTES} bytes",
    415: "request body must be application/json or application/x-www-form-urlencoded",
}


def unauthenticated() -> Unauthorized:
    """Return the 401 of a protected endpoint, which names the Bearer scheme."""
    return Unauthorized(www_authenticate=WWWAuthenticate("bearer"))


def render_http_error(error: HTTPException) -> Response:
    """Turn an HTTP error into the response the contract requires."""
    if error.code is None or error.code < 400:
        return error.get_response()  # a redirect or similar, not an error
    if error.code == 401:
        # exactly "text/plain", as SPEC.md writes it; the body is ASCII
        response = Response("Unauthorized", status=401, content_type="text/plain")
    else:
        if error.code == 403:
            message = "No access"
        elif error.description == type(error).description:
            message = DEFAULT_MESSAGES.get(error.code, error.name.lower())
        else:
            message = str(error.description)
        response = jsonify(message=message)
        response.status_code = error.code
    for name, value in error.get_headers():
        if name.lower() != "content-type":
            response.headers.add(name, value)
    return response


def render_store_unavailable(error: StoreUnavailableError) -> Response:
    """Answer 503 when the refresh-token store cannot be reached: a retry may succeed."""
    current_app.logger.warning("refresh-token store unavailable: %s", error)
    return render_http_error(
        ServiceUnavailable("token store is unavailable, try again shortly", retry_after=1)
    )


def render_unexpected_error(error: Exception) -> Response:
    """Log a bug with its traceback and answer a bare 500: fail closed, show nothing."""
    current_app.logger.exception("unhandled error", exc_info=error)
    return render_http_error(InternalServerError())


def register_error_handlers(app: Flask) -> None:
    """Route every error the app can raise to its renderer."""
    app.register_error_handler(HTTPException, render_http_error)
    app.register_error_handler(StoreUnavailableError, render_store_unavailable)
    app.register_error_handler(Exception, render_unexpected_error)
