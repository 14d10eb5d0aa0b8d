"""REFRESH_TOKEN_ROTATION: /token hands out a successor, and a reused token revokes its family."""

from __future__ import annotations

import json
import logging
import re
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import jwt
import pytest

from app.backends.interface import RETIRED_GENERATIONS_KEPT, token_digest
from tests.helpers.clock import ManualClock
from tests.helpers.tokens import assert_unauthorized, login, refresh, rotated

REFRESH_TOKEN = re.compile(r"[A-Za-z0-9]{42}")
CONCURRENT = 8


@pytest.fixture
def rotating(make_app):
    """Return a client of an app with rotation on, on a clock the test moves (``client.clock``)."""

    def make(**settings: str):
        clock = ManualClock()
        app = make_app(REFRESH_TOKEN_ROTATION="true", clock=clock, **settings)
        client = app.test_client()
        client.clock = clock
        return client

    return make


def security_events(caplog) -> list[logging.LogRecord]:
    return [record for record in caplog.records if hasattr(record, "event")]


def event_lines(capfd) -> list[dict]:
    """Return the request log's lines written since the last call that name an event."""
    return event_lines_of(capfd.readouterr().out)


def event_lines_of(out: str) -> list[dict]:
    """Return the request log's lines in ``out`` that name an event."""
    lines = [json.loads(line) for line in out.splitlines() if line[:1] == "{"]
    return [line for line in lines if "event" in line]


def test_without_rotation_a_refresh_token_is_reused_and_never_replaced(client):
    token = login(client)["refreshToken"]
    for _ in range(3):
        response = refresh(client, token)
        assert response.status_code == 200
        assert set(response.get_json()) == {"accessToken"}


def test_rotation_answers_a_new_refresh_token_that_replaces_the_old(rotating, signing_secret):
    client = rotating()
    token = login(client)["refreshToken"]
    response = refresh(client, token)
    assert response.status_code == 200
    body = response.get_json()
    assert list(body) == ["accessToken", "refreshToken"]
    assert REFRESH_TOKEN.fullmatch(body["refreshToken"])
    assert body["refreshToken"] != token
    claims = jwt.decode(body["accessToken"], signing_secret, algorithms=["HS256"])
    assert (claims["username"], claims["role"]) == ("alice", "user")
    assert response.headers["Cache-Control"] == "no-store"
    assert rotated(client, body["refreshToken"])


def test_a_reused_rotated_token_is_401_revokes_its_family_and_logs_one_event(
    rotating, caplog, capfd
):
    client = rotating()
    first = login(client)["refreshToken"]
    other_login = login(client)["refreshToken"]
    newest = rotated(client, rotated(client, first))
    caplog.set_level(logging.INFO)
    capfd.readouterr()
    assert_unauthorized(refresh(client, first))
    assert_unauthorized(refresh(client, newest))  # the family is revoked
    assert rotated(client, other_login)  # another login of the same user is not
    out = capfd.readouterr().out
    lines = [json.loads(line) for line in out.splitlines()]
    # the reuse is its request's own line: no second line for it
    assert [(line["event"], line["user"], line.get("family"), line["level"]) for line in lines] == [
        ("refresh_token_reuse", "alice", token_digest(first)[:12], "WARNING"),
        ("refresh_failed", None, None, "INFO"),
        ("refresh", "alice", token_digest(other_login)[:12], "INFO"),
    ]
    assert security_events(caplog) == []
    for token in (first, newest, other_login):
        assert token not in caplog.text
        assert token not in out


def test_rotation_refuses_an_unknown_token_or_another_users_and_keeps_it(rotating):
    client = rotating()
    token = login(client, "alice")["refreshToken"]
    assert_unauthorized(refresh(client, "x" * 42))
    assert_unauthorized(refresh(client, ""))
    assert_unauthorized(refresh(client, token, "bob"))
    assert_unauthorized(refresh(client, token, "Alice"))
    assert rotated(client, token)  # still alice's, still live


def test_a_retry_within_the_grace_gets_a_new_successor(rotating, caplog, capfd):
    client = rotating(REFRESH_TOKEN_REUSE_GRACE="10")
    token = login(client)["refreshToken"]
    lost = rotated(client, token)  # the answer the client never received
    client.clock.advance(9.9)
    caplog.set_level(logging.INFO)
    capfd.readouterr()
    retry = rotated(client, token)
    assert retry != lost
    assert [(line["event"], line["level"]) for line in event_lines(capfd)] == [
        ("refresh_token_retry", "INFO")
    ]
    assert security_events(caplog) == []
    assert rotated(client, retry)


def test_a_retired_token_at_the_end_of_the_grace_revokes_the_family(rotating):
    client = rotating(REFRESH_TOKEN_REUSE_GRACE="10")
    token = login(client)["refreshToken"]
    successor = rotated(client, token)
    client.clock.advance(10)
    assert_unauthorized(refresh(client, token))
    assert_unauthorized(refresh(client, successor))


def test_the_replaced_successor_presented_later_revokes_the_family(rotating):
    client = rotating(REFRESH_TOKEN_REUSE_GRACE="10")
    token = login(client)["refreshToken"]
    lost = rotated(client, token)
    retry = rotated(client, token)
    assert_unauthorized(refresh(client, lost))  # two holders of one family: theft
    assert_unauthorized(refresh(client, retry))


def test_a_victims_replaced_token_after_the_thiefs_rotation_is_reuse(rotating):
    client = rotating(REFRESH_TOKEN_REUSE_GRACE="5")
    first = login(client)["refreshToken"]
    victims = rotated(client, first)
    thiefs = rotated(client, first)  # a replay within the grace: a retry
    thiefs_next = rotated(client, thiefs)
    assert_unauthorized(refresh(client, victims))  # the reuse is revealed
    assert_unauthorized(refresh(client, thiefs_next))  # and the family is revoked


def test_revoking_the_live_token_revokes_its_family_as_a_plain_revoke(rotating, capfd):
    client = rotating()
    first = login(client)["refreshToken"]
    live = rotated(client, rotated(client, first))
    capfd.readouterr()
    response = client.delete(f"/token/{live}")
    assert (response.status_code, response.data) == (204, b"")
    assert [(line["event"], line["level"], line["revoked"]) for line in event_lines(capfd)] == [
        ("revoke", "INFO", token_digest(live)[:12])
    ]
    assert_unauthorized(refresh(client, live))
    assert_unauthorized(refresh(client, first))


# --- the tricks a thief could play to erase the reuse of a stolen token ---------------------
# Each gets the owner's stolen token and the owner's client; it returns the thief's token.


def revoke_the_retired_original(client, stolen: str) -> str:
    """The thief rotates the stolen token first, then revokes the retired original."""
    thiefs = rotated(client, stolen)
    assert client.delete(f"/token/{stolen}").status_code == 204
    return thiefs


def flush_it_out(client, stolen: str) -> str:
    """The thief rotates until the family forgets the original's own record."""
    thiefs = stolen
    for _ in range(RETIRED_GENERATIONS_KEPT + 1):
        thiefs = rotated(client, thiefs)
    return thiefs


def revoke_the_successor_the_grace_replaced(client, stolen: str) -> str:
    """The owner has just rotated; the thief retries the stolen token within the grace,
    which retires the owner's successor, then revokes that successor."""
    owners = rotated(client, stolen)
    thiefs = rotated(client, stolen)  # a retry: the owner's successor is retired
    assert client.delete(f"/token/{owners}").status_code == 204
    return thiefs


TRICKS = {
    "revoke the retired original": (revoke_the_retired_original, {}),
    "flush it out": (flush_it_out, {}),
    "flush it out, with a grace": (flush_it_out, {"REFRESH_TOKEN_REUSE_GRACE": "10"}),
    "revoke the successor the grace replaced": (
        revoke_the_successor_the_grace_replaced,
        {"REFRESH_TOKEN_REUSE_GRACE": "10"},
    ),
}


@pytest.mark.parametrize("trick", list(TRICKS))
def test_no_trick_of_a_thief_erases_the_owners_reuse(rotating, capfd, trick):
    play, settings = TRICKS[trick]
    client = rotating(**settings)
    stolen = login(client)["refreshToken"]
    other_login = login(client)["refreshToken"]
    capfd.readouterr()
    thiefs = play(client, stolen)
    assert_unauthorized(refresh(client, stolen))  # the owner's replay
    out = capfd.readouterr().out
    assert_unauthorized(refresh(client, thiefs))  # the thief's token is over
    reuses = [line for line in event_lines_of(out) if line["event"] == "refresh_token_reuse"]
    assert [(line["level"], line["user"], line["family"]) for line in reuses] == [
        ("WARNING", "alice", token_digest(stolen)[:12])
    ]
    assert rotated(client, other_login)  # the user's other logins live on
    assert stolen not in out
    assert thiefs not in out


def test_a_retired_tokens_revoke_is_a_204_and_a_reuse_event(rotating, capfd):
    client = rotating()
    first = login(client)["refreshToken"]
    second = rotated(client, first)
    live = rotated(client, second)
    capfd.readouterr()
    response = client.delete(f"/token/{second}")
    assert (response.status_code, response.data) == (204, b"")
    assert "Content-Type" not in response.headers
    [line] = event_lines(capfd)
    assert (line["event"], line["level"], line["user"], line["family"], line["revoked"]) == (
        "refresh_token_reuse", "WARNING", "alice", token_digest(first)[:12],
        token_digest(second)[:12],
    )  # fmt: skip
    assert line["path"] == "/token/<redacted>"
    assert "reason" not in line  # a 204: nothing was refused
    assert_unauthorized(refresh(client, live))
    capfd.readouterr()
    response = client.delete(f"/token/{second}")  # the family is over: unknown now
    assert (response.status_code, response.data) == (204, b"")
    assert [(line["event"], line["level"]) for line in event_lines(capfd)] == [("revoke", "INFO")]


def test_revoke_user_revokes_rotated_families(rotating):
    client = rotating()
    token = rotated(client, login(client)["refreshToken"])
    runner = client.application.test_cli_runner()
    result = runner.invoke(args=["tokens", "revoke-user", "alice"])
    assert result.stdout == "revoked 1 refresh token of 'alice'\n"
    assert_unauthorized(refresh(client, token))


def test_tokens_list_and_count_show_the_live_member_of_a_family(rotating):
    client = rotating()
    token = rotated(client, rotated(client, login(client)["refreshToken"]))
    runner = client.application.test_cli_runner()
    assert runner.invoke(args=["tokens", "count"]).stdout == "1\n"
    listed = runner.invoke(args=["tokens", "list", "alice"]).stdout
    assert listed.startswith(token_digest(token)[:12])
    assert len(listed.splitlines()) == 1


@pytest.mark.parametrize("grace", ["0", "10"])
def test_of_concurrent_refreshes_with_one_token_exactly_one_rotates(make_app, grace):
    app = make_app(REFRESH_TOKEN_ROTATION="true", REFRESH_TOKEN_REUSE_GRACE=grace)
    token = login(app.test_client())["refreshToken"]
    start = threading.Barrier(CONCURRENT, timeout=30)

    def refresh_at_once(_: int):
        client = app.test_client()
        start.wait()
        response = refresh(client, token)
        return response.status_code, (response.get_json(silent=True) or {}).get("refreshToken")

    with ThreadPoolExecutor(CONCURRENT) as pool:
        answers = list(pool.map(refresh_at_once, range(CONCURRENT)))
    store = app.extensions["token_store"]
    live = [new for status, new in answers if new and store.owner_of(new)]
    if grace == "0":
        assert Counter(status for status, _ in answers) == {200: 1, 401: CONCURRENT - 1}
        assert live == []  # the others' reuse revoked the winner's family
    else:
        assert Counter(status for status, _ in answers) == {200: CONCURRENT}
        assert len(live) == 1  # each retry replaced the unused successor
