"""One line per request, for every app the bench holds the service against.

The floor and the peers are loaded through ``logged`` (gunicorn:
``bench.request_line:logged('bench.floor_app')``), which writes one JSON line per request
to standard output with one ``os.write``, as the service's request log does: when, what was
asked, what was answered, how long it took. The service does that work too; an app held
against it without it would flatter the service (gunicorn's own access log, the other
choice, costs a plain app about a quarter of its CPU: more than the service's line).
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson
from flask import Flask


class RequestLine:
    """WSGI middleware: one JSON line per request on standard output (time, request, answer)."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        started = time.perf_counter()
        answer: list[Any] = []

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            answer[:] = (status, headers)
            return start_response(status, headers, exc_info)

        body = self.app(environ, start)
        status, headers = answer or ("500", [])
        length = next((int(v) for k, v in headers if k.lower() == "content-length"), 0)
        now = time.time()
        line = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
            + f".{int(now % 1 * 1000):03d}Z",
            "level": "INFO",
            "logger": "request",
            "method": environ["REQUEST_METHOD"],
            "path": environ.get("PATH_INFO", ""),
            "status": int(status[:3]),
            "duration_ms": round((time.perf_counter() - started) * 1000, 3),
            "bytes": length,
            "client": environ.get("REMOTE_ADDR"),
        }
        os.write(1, orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE))
        return body


def logged(module: str) -> RequestLine:
    """Return the Flask app of ``module`` with a request line (gunicorn: ``logged('...')``)."""
    application = importlib.import_module(module).app
    return RequestLine(application.wsgi_app if isinstance(application, Flask) else application)
