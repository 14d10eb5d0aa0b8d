"""Headers every answer carries: errors, redirects, 204s and routing's 404 and 405 included.

A WSGI wrapper around the Flask app, so that no answer can miss them, whichever
part of Flask built it. It costs one call and one list extend a request, less than
an ``after_request`` function (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask

#: ``nosniff``: a browser takes every answer as the type it says, never guesses another.
SECURITY_HEADERS = (("X-Content-Type-Options", "nosniff"),)

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class SecurityHeaders:
    """WSGI middleware adding ``headers`` to every answer of ``app``."""

    def __init__(self, app: WSGIApp, headers: Iterable[tuple[str, str]]) -> None:
        self.app = app
        self.headers = tuple(headers)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        added = self.headers

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            headers.extend(added)
            return start_response(status, headers, exc_info)

        return self.app(environ, start)


def init_security_headers(app: Flask) -> None:
    """Make every answer of ``app`` carry SECURITY_HEADERS."""
    # wrapping wsgi_app is Flask's documented way to add middleware; mypy sees a method
    app.wsgi_app = SecurityHeaders(app.wsgi_app, SECURITY_HEADERS)  # type: ignore[method-assign]
