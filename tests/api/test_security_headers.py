"""The security headers: added by the request log to whatever answer the app it wraps gives.

Every kind of answer of the service itself is checked in test_security_events.py.
"""

from __future__ import annotations

import os
import sys

import pytest

from app.http.request_log import SECURITY_HEADERS, RequestLog

pytestmark = pytest.mark.store("sqlite")  # no store is involved


def test_the_headers_are_added_to_an_answer_and_to_an_error_answer_alike():
    started = []

    def start_response(status, headers, exc_info=None):
        started.append((status, list(headers), exc_info))

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        try:
            raise ValueError("late")
        except ValueError:
            start_response("500 INTERNAL SERVER ERROR", [], sys.exc_info())
        return [b"body"]

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "127.0.0.1"}
    with open(os.devnull, "wb") as devnull:
        assert RequestLog(app, fd=devnull.fileno())(environ, start_response) == [b"body"]
    (ok, ok_headers, no_error), (failed, failed_headers, error) = started
    assert (ok, failed) == ("200 OK", "500 INTERNAL SERVER ERROR")
    assert ok_headers[:-1] == [("Content-Type", "text/plain"), *SECURITY_HEADERS]
    assert failed_headers[:-1] == list(SECURITY_HEADERS)
    assert ok_headers[-1][0] == failed_headers[-1][0] == "X-Request-ID"
    assert no_error is None
    assert error[0] is ValueError  # exc_info is handed on to the server


def test_the_service_adds_them_once(client):
    response = client.get("/healthz")
    for name, value in SECURITY_HEADERS:
        assert response.headers.get_all(name) == [value]
