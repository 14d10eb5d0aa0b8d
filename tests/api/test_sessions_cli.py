"""``flask sessions list USER`` and ``flask sessions end USER [ID]`` (on SQLite)."""

from __future__ import annotations

import importlib
import json
import logging
import re

import pytest

from app.auth.tokens import new_refresh_token
from app.backends.interface import LoginClient
from app.extensions import get_store
from tests.helpers.tokens import bearer, login

pytestmark = pytest.mark.store("sqlite")

LISTED = re.compile(
    r"([A-Za-z0-9_-]+)  (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)  (\d{4}-\d\d-\d\dT\d\d:\d\d:00Z)"
    r'  ("[^"]*")  (".*")'
)


def log_in(client, username: str, agent: str) -> dict[str, str]:
    return login(client, username, headers={"User-Agent": agent})


def refreshes(client, username: str, tokens: dict[str, str]) -> int:
    body = {"username": username, "refreshToken": tokens["refreshToken"]}
    return client.post("/token", json=body).status_code


def listed(runner, username: str) -> list[re.Match]:
    result = runner.invoke(args=["sessions", "list", username])
    assert result.exit_code == 0, result.output
    matches = [LISTED.fullmatch(line) for line in result.stdout.splitlines()]
    assert all(matches), result.stdout
    return matches  # type: ignore[return-value]


def test_list_shows_each_session_with_its_client_escaped(app, runner, client):
    tokens = log_in(client, "alice", "evil\x1b[31magent")
    log_in(client, "bob", "bob's")
    (line,) = listed(runner, "alice")
    assert line.group(4) == '"127.0.0.1"'
    assert json.loads(line.group(5)) == "evil\x1b[31magent"
    assert "\x1b" not in line.group(0)  # no escape sequence reaches a terminal
    assert tokens["refreshToken"] not in line.group(0)
    with app.app_context():  # what no HTTP header can hold, a store may
        get_store().issue(new_refresh_token(), "carol", LoginClient("", "two\nlines\u2028"))
    (line,) = listed(runner, "carol")
    assert line.group(4) == '"-"'
    assert json.loads(line.group(5)) == "two\nlines\u2028"


def test_list_pages_through_every_session(runner, client, monkeypatch):
    monkeypatch.setattr(importlib.import_module("app.cli.sessions"), "LIST_PAGE_SIZE", 2)
    for number in range(5):
        log_in(client, "alice", f"agent {number}")
    assert len({line.group(1) for line in listed(runner, "alice")}) == 5


def test_list_of_a_user_without_sessions_says_so(runner):
    result = runner.invoke(args=["sessions", "list", "nobody"])
    assert (result.exit_code, result.stdout) == (0, "")
    assert "no sessions for 'nobody'" in result.stderr


def test_end_with_an_id_ends_that_session_only(runner, client, caplog):
    caplog.set_level(logging.INFO)
    ended = log_in(client, "alice", "one")
    kept = log_in(client, "alice", "two")
    (session_id,) = [m.group(1) for m in listed(runner, "alice") if m.group(5) == '"one"']
    result = runner.invoke(args=["sessions", "end", "alice", session_id])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"ended the session {session_id} of 'alice'\n"
    assert refreshes(client, "alice", ended) == 401
    assert refreshes(client, "alice", kept) == 200
    events = [(r.event, r.user) for r in caplog.records if hasattr(r, "event")]
    assert events == [("session_ended", "alice")]
    again = runner.invoke(args=["sessions", "end", "alice", session_id])
    assert again.exit_code == 1
    assert f"'alice' has no session '{session_id}'" in again.stderr


def test_end_with_another_user_s_id_ends_nothing(runner, client):
    bob = log_in(client, "bob", "bob's")
    (line,) = listed(runner, "bob")
    assert runner.invoke(args=["sessions", "end", "alice", line.group(1)]).exit_code == 1
    assert refreshes(client, "bob", bob) == 200


def test_end_without_an_id_logs_the_user_out_everywhere(runner, client, caplog):
    caplog.set_level(logging.INFO)
    first = log_in(client, "alice", "one")
    second = log_in(client, "alice", "two")
    bob = log_in(client, "bob", "bob's")
    result = runner.invoke(args=["sessions", "end", "alice"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("logged 'alice' out everywhere: ended 2 sessions;")
    for tokens in (first, second):
        assert refreshes(client, "alice", tokens) == 401
        refused = client.get("/user-accessible", headers=bearer(tokens["accessToken"]))
        assert refused.status_code == 401
    assert refreshes(client, "bob", bob) == 200
    assert listed(runner, "alice") == []
    events = [(r.event, r.user) for r in caplog.records if hasattr(r, "event")]
    assert events == [("logged_out_everywhere", "alice")]
