"""The request log: one line per request on standard output; an X-Request-ID and the
security headers on each answer.

It replaces gunicorn's access log. A WSGI middleware inside ``app.http.proxy``, so the
client address is the one the app sees (an IP address); it times the app, reads the
status and length off the response, and writes one line with one ``os.write`` (atomic on a
pipe for lines under 4 KiB, so workers never interleave). Views add what only
they know, the authenticated user, why a request was refused, or the security
event it was (a login, a refresh refused...), with ``note``: a security event
that happens on a request is that request's line, never a second one.
Nothing secret is ever written: the query string is left out, the path of
``DELETE /token/<refreshToken>`` is redacted, and so is anything shaped like a
token elsewhere in the path or the username. In the text format every field a
client can shape is one word or one JSON string, with every character that is not
printable escaped, so no value can end a line or pass for another field.

The security headers are added here, around the whole Flask app, so that no answer can
miss them, whichever part of Flask built it (errors, redirects, 204s and routing's 404
and 405 included), and no request pays a middleware of its own for them.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson
from flask import request

from app.events import Event
from app.observability.logging_config import REQUEST_ID_KEY, quoted, timestamp, word
from app.observability.redaction import REDACTED, redact

#: ``nosniff``: a browser takes every answer as the type it says, never guesses another.
SECURITY_HEADERS = (("X-Content-Type-Options", "nosniff"),)
#: Key under which a request's notes (user, reason...) wait in the WSGI environ.
NOTES_KEY = "token_service.log_notes"
#: A client's X-Request-ID is kept when it is at most this long and of these characters.
MAX_REQUEST_ID_LENGTH = 128
REQUEST_ID_CHARACTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"
#: Longest path shown in a line: lines stay under PIPE_BUF (4096 bytes), so writes are atomic.
MAX_LOGGED_PATH = 512
#: Status and body length of a response that never started (the app raised).
FAILED = "500 INTERNAL SERVER ERROR"
#: What views may note beside ``user``, in the order a line shows them.
NOTED_FIELDS = ("reason", "revoked", "event", "family", "sessions_ended")
#: Security events whose line is a WARNING rather than INFO.
WARNING_EVENTS = frozenset({Event.REFRESH_TOKEN_REUSE})

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
Observer = Callable[[dict[str, Any], int, float, dict[str, str]], None]


def note(**fields: str) -> None:
    """Tell the request log (and the metrics) about the current request.

    Shown in the line: ``user``, ``reason`` (why it was refused), ``revoked`` (a
    digest prefix), ``event`` (a security event: login, refresh, revoke...) and
    ``family`` (a refresh token family's digest prefix), ``sessions_ended`` (how many
    sessions a login's REFRESH_TOKENS_PER_USER ended). Counted only: ``store_error``,
    ``rate_limit_error``.
    """
    notes = request.environ.get(NOTES_KEY)
    if notes is not None:  # None: a request that did not come through the request log
        notes.update(fields)


def request_id(environ: dict[str, Any]) -> str:
    """Return the client's X-Request-ID when it is sane, else a new random one."""
    given: str | None = environ.get("HTTP_X_REQUEST_ID")
    # strip() removes the allowed characters from both ends: a sane id leaves nothing. A
    # lone "-" is the text log's mark of an absent field, so it would read as no id at all.
    if (
        given
        and given != "-"
        and len(given) <= MAX_REQUEST_ID_LENGTH
        and not given.strip(REQUEST_ID_CHARACTERS)
    ):
        return given
    return os.urandom(16).hex()


class RequestLog:
    """WSGI middleware writing the request log; ``text`` picks the human-readable format."""

    def __init__(
        self,
        app: WSGIApp,
        *,
        text: bool = False,
        fd: int = 1,
        observe: Observer | None = None,
    ) -> None:
        self.app = app
        self.fd = fd
        #: Called with (environ, status, seconds, notes) after each line: the metrics
        self.observe = observe
        self.render = self._text_line if text else self._json_line
        #: Added to every answer, before its X-Request-ID.
        self.headers: tuple[tuple[str, str], ...] = SECURITY_HEADERS
        #: (second, its text): one attribute, so threads never see a second with another's text
        self._stamp = (-1, "")

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        started = time.perf_counter()
        environ[REQUEST_ID_KEY] = rid = request_id(environ)
        notes: dict[str, str] = {}
        environ[NOTES_KEY] = notes
        answer: list[Any] = []
        added = self.headers

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            headers.extend(added)
            headers.append(("X-Request-ID", rid))
            answer[:] = (status, headers)
            return start_response(status, headers, exc_info)

        try:
            body = self.app(environ, start)
        except BaseException:
            self._write(environ, FAILED, [], notes, started)
            raise
        status, headers = answer if answer else (FAILED, [])
        self._write(environ, status, headers, notes, started)
        return body

    def _write(
        self,
        environ: dict[str, Any],
        status: str,
        headers: list[tuple[str, str]],
        notes: dict[str, str],
        started: float,
    ) -> None:
        now = time.time()
        duration = time.perf_counter() - started
        length = 0
        if environ["REQUEST_METHOD"] != "HEAD":
            for name, value in headers:
                if name == "Content-Length":
                    length = int(value)
                    break
        code = int(status[:3])
        line = self.render(environ, now, code, duration, length, notes)
        try:  # noqa: SIM105 (contextlib.suppress would cost more on every request)
            os.write(self.fd, line)
        except OSError:  # a closed or full standard output must not fail the request
            pass
        if self.observe is not None:
            self.observe(environ, code, duration, notes)

    def _time(self, now: float) -> str:
        second = int(now)
        stamped, text = self._stamp
        if second != stamped:  # strftime once a second, not once a request
            text = timestamp(second)[:-5]
            self._stamp = (second, text)
        return f"{text}.{int((now - second) * 1000):03d}Z"

    def _fields(
        self, environ: dict[str, Any], notes: dict[str, str]
    ) -> tuple[str, str | None, str]:
        """Return what both formats show the same way: the path, the user and the level."""
        path = environ.get("PATH_INFO", "")
        if not path.isascii():  # WSGI gives the path's bytes as latin-1: show UTF-8, as routed
            path = path.encode("latin-1", "replace").decode("utf-8", "replace")
        path = redacted_path(path)[:MAX_LOGGED_PATH]  # redacted first: no token cut in two
        user = notes.get("user")
        if user is not None and (len(user) >= 42 or "eyJ" in user):
            user = redact(user)  # a client that pasted a token as its username
        level = "WARNING" if notes.get("event") in WARNING_EVENTS else "INFO"
        return path, user, level

    def _json_line(
        self,
        environ: dict[str, Any],
        now: float,
        status: int,
        duration: float,
        length: int,
        notes: dict[str, str],
    ) -> bytes:
        path, user, level = self._fields(environ, notes)
        line = {
            "time": self._time(now),
            "level": level,
            "logger": "request",
            "method": environ["REQUEST_METHOD"],
            "path": path,
            "status": status,
            "duration_ms": round(duration * 1000, 3),
            "bytes": length,
            "client": environ.get("REMOTE_ADDR"),
            "user": user,
            "request_id": environ[REQUEST_ID_KEY],
        }
        for name in NOTED_FIELDS:
            if name in notes:
                line[name] = notes[name]
        try:
            return orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE)
        except TypeError:  # a lone surrogate in a provider's user id: orjson refuses it
            return (json.dumps(line, separators=(",", ":")) + "\n").encode()

    def _text_line(
        self,
        environ: dict[str, Any],
        now: float,
        status: int,
        duration: float,
        length: int,
        notes: dict[str, str],
    ) -> bytes:
        path, user, level = self._fields(environ, notes)
        line = (
            f"{self._time(now)} {level} request {word(environ.get('REMOTE_ADDR'))} "
            f"{quoted(environ['REQUEST_METHOD'] + ' ' + path)} {status} {length}B "
            f"{duration * 1000:.3f}ms user={word(user)} "
            f"request_id={environ[REQUEST_ID_KEY]}"
        )
        for name in NOTED_FIELDS:
            if name in notes:
                line += f" {name}={word(notes[name])}"
        return (line + "\n").encode("utf-8", "backslashreplace")


def redacted_path(path: str) -> str:
    """Return a decoded request path fit for a log line.

    The path is what the app routes (percent-escapes already decoded once), so
    ``/%74oken/x`` and ``/token%2Fx`` both arrive as ``/token/x``; a path spelled
    with escapes left over (double-encoded) is still caught by ``redact``.
    """
    if path.startswith("/token/"):
        return "/token/" + REDACTED
    if len(path) < 42 and "%" not in path and "eyJ" not in path and "oken/" not in path.lower():
        return path  # none of the patterns can match: skip the four regular expressions
    return redact(path)
