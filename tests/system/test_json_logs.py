"""The logs of a real gunicorn: every request one JSON line, gunicorn's own lines in the
same format, and no credential in any of them."""

from __future__ import annotations

import json

import pytest

from tests.helpers.servers import fresh
from tests.helpers.tokens import TOKEN_SPELLINGS, bearer

PASSWORD = "hunter2-not-for-logs"


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
