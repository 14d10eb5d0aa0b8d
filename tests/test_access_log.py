"""Log redaction on its own: no refresh token or JWT survives, however it is spelled."""

from __future__ import annotations

import logging

import pytest

from app.access_log import RedactingFilter, redact

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
        ("GET /healthz HTTP/1.1", "GET /healthz HTTP/1.1"),
        ("POST /token HTTP/1.1", "POST /token HTTP/1.1"),
    ],
)
def test_redact(line, expected):
    assert redact(line) == expected


def test_filter_rewrites_formatted_records():
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "bad line %r", (TOKEN,), None)
    assert RedactingFilter().filter(record) is True
    assert record.getMessage() == "bad line '<redacted>'"
