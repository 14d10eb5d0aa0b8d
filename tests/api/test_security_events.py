"""Security headers on every answer, and one structured line per security event, no secret."""

from __future__ import annotations

import json
import logging
import re

import pytest
from flask import Flask, redirect

from app.observability.logging_config import JsonFormatter, TextFormatter
from tests.helpers.tokens import bearer, login

TOKEN = "C2NdWrW9MdQ6ksKauArabZPBsTCUyExCV07XsHmBis"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJ1c2VybmFtZSI6ImEifQ.c2lnbmF0dXJl"


# --- X-Content-Type-Options -----------------------------------------------------------


@pytest.fixture
def odd_routes(app: Flask) -> Flask:
    """Add a redirect and a failing view, kinds of answer the service has few of."""
    app.add_url_rule("/test-redirect", "test_redirect", lambda: redirect("/healthz"))

    def fail() -> None:
        raise RuntimeError("a bug")

    app.add_url_rule("/test-failure", "test_failure", fail)
    app.config["TESTING"] = False  # the 500 is rendered, not raised into the test
    return app


def test_every_kind_of_answer_says_nosniff(odd_routes, client):
    tokens = login(client)
    calls = [
        ("POST", "/login", {"json": {"username": "a"}}, 200),
        ("POST", "/token", {"json": {"username": "a", "refreshToken": "x"}}, 401),
        ("DELETE", f"/token/{tokens['refreshToken']}", {}, 204),
        ("GET", "/user-accessible", {"headers": bearer(tokens["accessToken"])}, 200),
        ("HEAD", "/user-accessible", {"headers": bearer(tokens["accessToken"])}, 200),
        ("GET", "/admin-accessible", {"headers": bearer(tokens["accessToken"])}, 403),
        ("GET", "/user-accessible", {}, 401),
        ("POST", "/login", {"data": "{", "content_type": "application/json"}, 400),
        ("POST", "/login", {"data": "x", "content_type": "text/plain"}, 415),
        ("POST", "/login", {"data": "x" * 20_000, "content_type": "application/json"}, 413),
        ("GET", "/nowhere", {}, 404),
        ("GET", "/login", {}, 405),
        ("OPTIONS", "/healthz", {}, 405),
        ("GET", "/test-redirect", {}, 302),
        ("GET", "/test-failure", {}, 500),
        ("POST", "/auth/logout", {}, 204),
        ("GET", "/openapi.json", {}, 200),
    ]
    for method, path, options, status in calls:
        response = client.open(path, method=method, **options)
        assert response.status_code == status, (method, path)
        assert response.headers.get_all("X-Content-Type-Options") == ["nosniff"], (method, path)


def test_token_answers_keep_no_store_and_no_cache(make_app):
    client = make_app(RATE_LIMIT_AUTH="1 per minute", RATE_LIMIT_EXEMPT="").test_client()
    tokens = login(client)
    body = {"username": "alice", "refreshToken": tokens["refreshToken"]}
    answers = [
        client.post("/token", json=body),  # 200
        client.post("/token", json=body),  # 429
        client.post("/token", json={**body, "refreshToken": "x"}),  # 429 before the 401
        client.post("/login", json={"username": "bob"}),  # 429
    ]
    assert [answer.status_code for answer in answers] == [200, 429, 429, 429]
    for answer in answers:
        assert answer.headers["Cache-Control"] == "no-store"
        assert answer.headers["Pragma"] == "no-cache"


# --- security events: the request's own line -----------------------------------------


def lines(capfd) -> list[dict]:
    return [json.loads(line) for line in capfd.readouterr().out.splitlines() if line[:1] == "{"]


def test_each_security_event_on_a_request_is_that_requests_one_line(make_app, capfd):
    client = make_app(RATE_LIMIT_AUTH="2 per minute").test_client()
    remote = {"environ_base": {"REMOTE_ADDR": "203.0.113.7"}}
    tokens = login(client, "alice")
    client.post("/token", json={"username": "alice", "refreshToken": tokens["refreshToken"]})
    client.post("/token", json={"username": "bob", "refreshToken": tokens["refreshToken"]})
    client.post("/token", json={"username": "alice", "refreshToken": "unknown"})
    client.delete(f"/token/{tokens['refreshToken']}")
    client.delete("/token/unknown")
    for _ in range(3):
        client.post("/login", json={"username": "carol"}, **remote)
    logged = lines(capfd)
    assert [
        (line["path"], line["status"], line.get("event"), line.get("reason"), line["user"])
        for line in logged
    ] == [
        ("/login", 200, "login", None, "alice"),
        ("/token", 200, "refresh", None, "alice"),
        ("/token", 401, "refresh_failed", "another_users_token", None),
        ("/token", 401, "refresh_failed", "unknown_refresh_token", None),
        ("/token/<redacted>", 204, "revoke", None, None),
        ("/token/<redacted>", 204, "revoke", None, None),
        ("/login", 200, "login", None, "carol"),
        ("/login", 200, "login", None, "carol"),
        ("/login", 429, "rate_limited", "rate_limited", None),
    ]
    assert "revoked" in logged[4]
    assert "revoked" not in logged[5]
    text = json.dumps(logged)
    assert tokens["refreshToken"] not in text
    assert tokens["accessToken"] not in text


def test_protected_endpoints_raise_no_event(client, capfd):
    client.get("/user-accessible")
    client.get("/healthz")
    assert all("event" not in line for line in lines(capfd))


def test_events_in_the_text_format(make_app, capfd):
    client = make_app(LOG_FORMAT="text").test_client()
    login(client, "alice")
    client.post("/token", json={"username": "alice", "refreshToken": "unknown"})
    out = capfd.readouterr().out.splitlines()
    assert out[0].endswith(" event=login")
    assert re.search(r" 401 .* reason=unknown_refresh_token event=refresh_failed$", out[1])


# --- security events outside a request: one app-logger line ---------------------------


def record(**extra) -> logging.LogRecord:
    made = logging.LogRecord("app", logging.INFO, __file__, 1, "user added: %r", ("alice",), None)
    made.__dict__.update(extra)
    return made


def test_the_json_formatter_writes_the_fields_given_in_extra():
    line = json.loads(JsonFormatter().format(record(event="user_added", user="alice", n=3)))
    assert line == {
        "time": line["time"],
        "level": "INFO",
        "logger": "app",
        "message": "user added: 'alice'",
        "event": "user_added",
        "user": "alice",
        "n": 3,
    }


def test_the_text_formatter_writes_the_fields_given_in_extra():
    line = TextFormatter().format(record(event="user_added", user="Zoë Q", n=3))
    assert line.endswith(" INFO app: user added: 'alice' event=user_added user=\"Zoë Q\" n=3")


@pytest.mark.parametrize("formatter", [JsonFormatter(), TextFormatter()])
def test_fields_given_in_extra_are_redacted_and_never_replace_the_lines_own(formatter):
    line = formatter.format(record(event="x", user=f"{TOKEN} {JWT}", level="FORGED"))
    assert TOKEN not in line
    assert JWT not in line
    if isinstance(formatter, JsonFormatter):
        assert json.loads(line)["level"] == "INFO"


@pytest.mark.parametrize("unprintable", ["\n", "\r", "\u2028", "\u0085", "\x7f", "\u202e"])
def test_a_text_line_stays_one_line_whatever_its_message_and_fields_hold(unprintable):
    text = f"a{unprintable}2026-01-01T00:00:00.000Z ERROR forged: line"
    logged = record(event="login", user=text)
    logged.msg, logged.args = "unknown role %s", (text,)
    line = TextFormatter().format(logged)
    assert len(line.splitlines()) == 1
    assert line.isprintable()
    shown_user = line.split(" user=", 1)[1]
    assert json.loads(shown_user) == text  # the field reads back exactly, escapes undone
