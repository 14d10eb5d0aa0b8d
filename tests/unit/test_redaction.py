"""Log redaction on its own: no refresh token or JWT survives, however it is spelled."""

from __future__ import annotations

import logging

import pytest

from app.http.request_log import redacted_path
from app.observability.logging_config import JsonFormatter, TextFormatter
from app.observability.redaction import redact

TOKEN = "C2NdWrW9MdQ6ksKauArabZPBsTCUyExCV07XsHmBis"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJ1c2VybmFtZSI6ImEifQ.c2lnbmF0dXJl"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (f"DELETE /token/{TOKEN} HTTP/1.1", "DELETE /token/<redacted> HTTP/1.1"),
        (f"DELETE /%74oken/{TOKEN} HTTP/1.1", "DELETE /%74oken/<redacted> HTTP/1.1"),
        (f"DELETE /TO%4BEN%2f{TOKEN}?a=1 HTTP/1.1", "DELETE /TO%4BEN%2f<redacted>?a=1 HTTP/1.1"),
        (f"DELETE /token/%41{TOKEN[1:]} HTTP/1.1", "DELETE /token/<redacted> HTTP/1.1"),
        (f"Invalid request '{TOKEN}\x7f'", "Invalid request '<redacted>\x7f'"),
        (
            f"GET /user-accessible?access_token={JWT} HTTP/1.1",
            "GET /user-accessible?access_token=<redacted> HTTP/1.1",
        ),
        (
            "GET /auth/corp/callback?code=O0glCE-x_1&state=Xcgs&iss=http%3A%2F%2Fid HTTP/1.1",
            "GET /auth/corp/callback?code=<redacted>&state=<redacted>&iss=http%3A%2F%2Fid HTTP/1.1",
        ),
        (  # a query quoted without its ?: the first parameter too
            "unknown query 'code=SECRETCODE123&state=abc'",
            "unknown query 'code=<redacted>&state=<redacted>'",
        ),
        ("GET /x?barcode=1&x_code=2 HTTP/1.1", "GET /x?barcode=1&x_code=2 HTTP/1.1"),
        ("GET /healthz HTTP/1.1", "GET /healthz HTTP/1.1"),
        ("POST /token HTTP/1.1", "POST /token HTTP/1.1"),
    ],
)
def test_redact(line, expected):
    assert redact(line) == expected


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/token/anything at all, even short", "/token/<redacted>"),
        ("/token//x", "/token/<redacted>"),
        (f"/token%2F{TOKEN}", "/token%2F<redacted>"),  # double-encoded: one decoding left
        (f"/TOKEN/{TOKEN}", "/TOKEN/<redacted>"),
        (f"/nope/{JWT}", "/nope/<redacted>"),
        (f"/nope/{TOKEN}/x", "/nope/<redacted>/x"),
        ("/user-accessible", "/user-accessible"),
        ("/token", "/token"),
    ],
)
def test_redacted_path(path, expected):
    assert redacted_path(path) == expected


@pytest.mark.parametrize("formatter", [JsonFormatter(), TextFormatter()])
def test_log_lines_are_redacted_whole_message_arguments_and_traceback(formatter):
    try:
        raise ValueError(f"bad token {TOKEN}")
    except ValueError as error:
        exc_info = (type(error), error, error.__traceback__)
    record = logging.LogRecord(
        "gunicorn.error", logging.WARNING, __file__, 1, "Invalid request %r", (JWT,), exc_info
    )
    line = formatter.format(record)
    assert TOKEN not in line
    assert JWT not in line
    assert line.count("<redacted>") == 2
