"""The request log: one line per request with every field, a request id on every answer,
and never a credential, on any endpoint, however the client spells it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
from flask import redirect
from gunicorn.glogging import Logger as GunicornLogger

from app.logging_config import ServiceGunicornLogger
from app.request_log import MAX_REQUEST_ID_LENGTH
from tests.conftest import ROOT, bearer, fresh, login, make_token, valid_claims

TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
GENERATED_ID = re.compile(r"[0-9a-f]{32}")
PASSWORD = "hunter2-not-for-logs"
OTHER_KEYS_TOKEN = make_token("another-secret-that-is-long-enough-32b", valid_claims())
FIELDS = {
    "time", "level", "logger", "method", "path", "status", "duration_ms", "bytes", "client",
    "user", "request_id",
}  # fmt: skip


def request_lines(capfd) -> list[dict]:
    """Return the request log's lines written since the last call, parsed."""
    out = capfd.readouterr().out
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def last_line(capfd) -> dict:
    lines = request_lines(capfd)
    assert len(lines) == 1, lines
    return lines[0]


def test_one_json_line_per_request_with_every_field(client, capfd):
    before = time.time()
    response = client.post(
        "/login", json={"username": "alice", "password": PASSWORD}, headers={"X-Request-ID": "r-1"}
    )
    line = last_line(capfd)
    assert set(line) == FIELDS | {"event"}  # a login is a security event
    assert line["event"] == "login"
    assert TIME.fullmatch(line["time"])
    logged = time.mktime(time.strptime(line["time"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
    assert before - 1 <= logged <= time.time()
    assert line["level"] == "INFO"
    assert line["logger"] == "request"
    assert line["method"] == "POST"
    assert line["path"] == "/login"
    assert line["status"] == 200
    assert isinstance(line["duration_ms"], float)
    assert 0 < line["duration_ms"] < 60_000
    assert line["bytes"] == len(response.data)
    assert line["client"] == "127.0.0.1"
    assert line["user"] == "alice"
    assert line["request_id"] == "r-1" == response.headers["X-Request-ID"]


def test_user_is_the_authenticated_one_and_null_without_one(client, capfd):
    token = login(client, "bob")["accessToken"]
    request_lines(capfd)
    client.get("/user-accessible", headers=bearer(token))
    assert last_line(capfd)["user"] == "bob"
    client.get("/healthz")
    assert last_line(capfd)["user"] is None
    client.get("/user-accessible")
    line = last_line(capfd)
    assert (line["status"], line["user"], line["reason"]) == (401, None, "missing")


def test_user_is_the_cookie_user_on_api_v1_me(client, capfd, signing_key):
    from app.tokens import issue_cookie_token

    cookie = issue_cookie_token(
        {"source": "corp", "id": "u-42", "shownName": "A"}, signing_key.ring, 60
    )
    client.set_cookie("jwt", cookie)
    assert client.get("/api/v1/me").status_code == 200
    assert last_line(capfd)["user"] == "u-42"
    assert cookie not in capfd.readouterr().err


@pytest.mark.parametrize(
    ("call", "status", "reason"),
    [
        (lambda c, t: c.get("/user-accessible"), 401, "missing"),
        (lambda c, t: c.get("/user-accessible", headers={"Authorization": "Basic x"}), 401,
         "malformed"),
        (lambda c, t: c.get("/user-accessible", headers=bearer("not.a.jwt")), 401, "malformed"),
        (lambda c, t: c.get("/user-accessible", headers=bearer(OTHER_KEYS_TOKEN)), 401,
         "bad_signature"),
        (lambda c, t: c.get("/admin-accessible", headers=bearer(t)), 403, "wrong_role"),
        (lambda c, t: c.post("/token", json={"username": "alice", "refreshToken": "x"}), 401,
         "unknown_refresh_token"),
    ],
)  # fmt: skip
def test_refused_requests_say_why(client, capfd, call, status, reason):
    token = login(client, "alice")["accessToken"]
    request_lines(capfd)
    assert call(client, token).status_code == status
    line = last_line(capfd)
    assert (line["status"], line["reason"]) == (status, reason)


def test_expired_token_is_logged_as_expired(client, capfd, signing_secret):
    now = int(time.time())
    token = make_token(signing_secret, valid_claims(iat=now - 120, exp=now - 1))
    client.get("/user-accessible", headers=bearer(token))
    assert last_line(capfd)["reason"] == "expired"


def test_refresh_with_another_users_token_is_logged_as_such(client, capfd):
    tokens = login(client, "alice")
    request_lines(capfd)
    client.post("/token", json={"username": "bob", "refreshToken": tokens["refreshToken"]})
    line = last_line(capfd)
    assert (line["user"], line["reason"]) == (None, "another_users_token")


def test_revoke_logs_the_digest_prefix_of_a_known_token_only(client, capfd):
    import hashlib

    token = login(client)["refreshToken"]
    request_lines(capfd)
    client.delete(f"/token/{token}")
    assert last_line(capfd)["revoked"] == hashlib.sha256(token.encode()).hexdigest()[:12]
    client.delete(f"/token/{token}")
    assert "revoked" not in last_line(capfd)


def test_text_format_is_one_readable_line(make_app, capfd):
    client = make_app(LOG_FORMAT="text").test_client()
    client.post("/login", json={"username": "Zoë Q", "password": PASSWORD})
    client.delete("/token/" + "x" * 42, headers={"X-Request-ID": "t-1"})
    out = capfd.readouterr().out.splitlines()
    assert len(out) == 2, out
    assert re.fullmatch(
        r"\S+Z INFO request 127\.0\.0\.1 \"POST /login\" 200 \d+B \d+\.\d{3}ms "
        r'user="Zoë Q" request_id=[0-9a-f]{32} event=login',
        out[0],
    ), out[0]
    assert TIME.fullmatch(out[0].split()[0])
    assert re.fullmatch(
        r'\S+ INFO request 127\.0\.0\.1 "DELETE /token/<redacted>" 204 0B \S+ms user=- '
        r"request_id=t-1 event=revoke",
        out[1],
    ), out[1]


def test_text_format_escapes_what_could_forge_a_line(make_app, capfd):
    client = make_app(LOG_FORMAT="text").test_client()
    client.get('/nope%0A2026-01-01T00:00:00.000Z%20INFO%20request%20"forged"')
    out = capfd.readouterr().out
    assert len(out.splitlines()) == 1
    assert '"GET "/nope\\n2026-01-01T00:00:00.000Z INFO request \\"forged\\""" 404' in out


# --- X-Request-ID -------------------------------------------------------------------


@pytest.mark.parametrize(
    "given", ["abc", "A.b-c_9", "x" * MAX_REQUEST_ID_LENGTH, "0123456789abcdef0123456789abcdef"]
)
def test_a_sane_request_id_is_echoed_and_logged(client, capfd, given):
    response = client.get("/healthz", headers={"X-Request-ID": given})
    assert response.headers["X-Request-ID"] == given
    assert last_line(capfd)["request_id"] == given


@pytest.mark.parametrize(
    "given",
    ["", "x" * (MAX_REQUEST_ID_LENGTH + 1), "a b", "a\tb", "a/b", "a,b", "<script>", "é", "a\x00"],
)
def test_an_insane_request_id_is_replaced_by_a_generated_one(client, capfd, given):
    response = client.get("/healthz", headers={"X-Request-ID": given})
    generated = response.headers["X-Request-ID"]
    assert GENERATED_ID.fullmatch(generated)
    assert last_line(capfd)["request_id"] == generated


def test_two_request_id_headers_are_replaced(client):
    response = client.get("/healthz", headers=[("X-Request-ID", "a"), ("X-Request-ID", "b")])
    assert GENERATED_ID.fullmatch(response.headers["X-Request-ID"])


def test_generated_request_ids_differ(client):
    ids = {client.get("/healthz").headers["X-Request-ID"] for _ in range(20)}
    assert len(ids) == 20


@pytest.fixture
def app_with_redirect(app):
    @app.get("/moved")
    def moved():
        return redirect("/healthz")

    return app


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status"),
    [
        ("get", "/user-accessible", {}, 401),
        ("post", "/token", {"json": {"username": "a", "refreshToken": "b"}}, 401),
        ("get", "/nope", {}, 404),
        ("put", "/login", {}, 405),
        ("post", "/login", {"data": "x" * 20_000, "content_type": "application/json"}, 413),
        ("post", "/login", {"data": "{", "content_type": "application/json"}, 400),
        ("post", "/login", {"data": "x", "content_type": "text/plain"}, 415),
        ("delete", "/token/abc", {}, 204),
        ("get", "/moved", {}, 302),
        ("get", "/auth/nobody/login", {}, 404),
    ],
)
def test_every_answer_carries_the_request_id(
    app_with_redirect, capfd, method, path, kwargs, status
):
    client = app_with_redirect.test_client()
    response = getattr(client, method)(path, headers={"X-Request-ID": "every-1"}, **kwargs)
    assert response.status_code == status
    assert response.headers.getlist("X-Request-ID") == ["every-1"]
    line = last_line(capfd)
    assert (line["status"], line["request_id"]) == (status, "every-1")


def test_403_carries_the_request_id(client, capfd):
    token = login(client)["accessToken"]
    response = client.get("/admin-accessible", headers={**bearer(token), "X-Request-ID": "f-1"})
    assert (response.status_code, response.headers["X-Request-ID"]) == (403, "f-1")


def test_an_unexpected_error_is_logged_500_with_its_request_id(app, capfd):
    @app.get("/boom")
    def boom():
        raise RuntimeError("bug")

    response = app.test_client().get("/boom", headers={"X-Request-ID": "boom-1"})
    assert (response.status_code, response.headers["X-Request-ID"]) == (500, "boom-1")
    line = last_line(capfd)
    assert (line["status"], line["request_id"]) == (500, "boom-1")


# --- no credential in any line --------------------------------------------------------


TOKEN_SPELLINGS = [
    "/token/{t}",
    "/%74oken/{t}",
    "/%74%6F%6B%65%6E/{t}",
    "/token%2F{t}",
    "/token%2f{t}",
    "/to%6Ben%2F{t}",
    "/token/{t}/",
    "/token//{t}",
    "/token/{t}?x=1",
]


@pytest.mark.parametrize("spelling", TOKEN_SPELLINGS)
def test_revoke_path_is_redacted_however_spelled(client, capfd, spelling):
    token = login(client)["refreshToken"]
    request_lines(capfd)
    response = client.delete(spelling.format(t=token))
    assert response.status_code == 204
    captured = capfd.readouterr()
    assert token not in captured.out + captured.err
    line = json.loads(captured.out)
    assert line["path"] == "/token/<redacted>"
    if not spelling.startswith("/token//") and not spelling.endswith("/"):
        refresh = client.post("/token", json={"username": "alice", "refreshToken": token})
        assert refresh.status_code == 401  # the very token was revoked


def test_no_credential_in_any_line_across_every_endpoint(
    client, capfd, signing_secret, signing_key
):
    from app.tokens import issue_cookie_token

    secrets_seen = {PASSWORD, signing_secret}
    tokens = login(client, "alice", headers={"X-Request-ID": "x"})
    form = client.post("/login", data={"username": "bob", "password": PASSWORD}).get_json()
    secrets_seen |= set(tokens.values()) | set(form.values())
    access, refresh = tokens["accessToken"], tokens["refreshToken"]
    body = {"username": "alice", "refreshToken": refresh}
    renewed = client.post("/token", json=body).get_json()["accessToken"]
    secrets_seen.add(renewed)
    client.post("/token", data=body)
    client.post("/token", json={"username": "mallory", "refreshToken": refresh})
    client.post("/token", json={"username": access, "refreshToken": refresh})
    client.get("/user-accessible", headers=bearer(access))
    client.get("/admin-accessible", headers=bearer(access))
    client.get("/user-accessible", headers=bearer(access[:-3] + "abc"))
    client.post("/restaurant-reservation", headers=bearer(access), json={"guestsCount": 2})
    client.get(f"/user-accessible?access_token={access}&refresh_token={refresh}")
    client.get(f"/auth/corp/callback?code=auth-code-123456&state=state-654321&x={refresh}")
    client.get(f"/{access}")
    client.get(f"/nope/{refresh}")
    cookie = issue_cookie_token({"source": "corp", "id": "u-1"}, signing_key.ring, 60)
    secrets_seen.add(cookie)
    client.set_cookie("jwt", cookie)
    client.get("/api/v1/me")
    client.post("/auth/logout")
    client.post("/login", json={"username": refresh, "password": PASSWORD})  # pasted by mistake
    for spelling in TOKEN_SPELLINGS:
        client.delete(spelling.format(t=refresh))
    captured = capfd.readouterr()
    output = captured.out + captured.err
    assert len(captured.out.splitlines()) >= 25
    for secret in secrets_seen:
        assert secret not in output
    assert "auth-code-123456" not in output
    assert "state-654321" not in output
    assert "eyJ" not in output


@pytest.mark.gunicorn
def test_real_gunicorn_logs_every_request_as_json_and_no_credential(gunicorn_server):
    server = gunicorn_server({"LOG_LEVEL": "DEBUG"}, workers=2)
    tokens = fresh(
        "POST", f"{server.url}/login", json={"username": "alice", "password": PASSWORD}
    ).json()
    access, refresh = tokens["accessToken"], tokens["refreshToken"]
    answers = [
        fresh("GET", f"{server.url}/user-accessible", headers=bearer(access)),
        fresh("POST", f"{server.url}/token", data={"username": "alice", "refreshToken": refresh}),
        fresh("GET", f"{server.url}/user-accessible?access_token={access}"),
        fresh("GET", f"{server.url}/auth/corp/callback?code=auth-code-123456&state=s"),
        fresh("GET", f"{server.url}/admin-accessible", headers=bearer(access)),
        fresh("GET", f"{server.url}/healthz", headers={"X-Request-ID": "probe-7"}),
    ]
    for spelling in TOKEN_SPELLINGS:
        answers.append(fresh("DELETE", server.url + spelling.format(t=refresh)))
    server.stop()
    log = server.log_path.read_text()
    for secret in (access, refresh, PASSWORD, "auth-code-123456"):
        assert secret not in log
    lines = [json.loads(line) for line in log.splitlines()]  # every line is JSON
    requests_logged = [line for line in lines if line["logger"] == "request"]
    logged_ids = {line["request_id"] for line in requests_logged}
    assert {answer.headers["X-Request-ID"] for answer in answers} <= logged_ids
    assert "probe-7" in logged_ids
    assert any(line["logger"] == "gunicorn.error" for line in lines)  # same format
    deletes = [line for line in requests_logged if line["method"] == "DELETE"]
    assert {line["path"] for line in deletes} == {"/token/<redacted>"}


def test_gunicorn_builds_no_access_line_beside_the_request_log(monkeypatch):
    """gunicorn takes logconfig_dict as a wish for access lines and builds them (some 40
    atoms a request) even for a logger that writes nothing; the service's logger does not."""
    logger = ServiceGunicornLogger.__new__(ServiceGunicornLogger)  # setup() would reconfigure
    monkeypatch.setattr(GunicornLogger, "atoms", lambda *args: pytest.fail("atoms were built"))
    assert not logger.access_log_enabled
    assert logger.access(None, None, {}, None) is None


def test_gunicorn_conf_uses_the_service_logger(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "--print-config", "wsgi:app"],
        cwd=ROOT, env={**os.environ, "INSTANCE_PATH": str(tmp_path / "instance")},
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    settings = dict(re.findall(r"^(\w+)\s+= ?(.*)$", completed.stdout, re.M))
    assert "ServiceGunicornLogger" in settings["logger_class"]
    assert settings["accesslog"] == "None"
