"""REFRESH_TOKENS_PER_USER and REFRESH_TOKEN_LIFETIME: bounded growth of the refresh tokens."""

from __future__ import annotations

import json
import logging

import pytest

from app.backends.interface import token_digest
from tests.helpers.clock import ManualClock
from tests.helpers.tokens import assert_unauthorized, login, refresh, rotated


def app_on_a_clock(make_app, **settings: str):
    clock = ManualClock()
    app = make_app(clock=clock, **settings)
    return app, app.test_client(), clock


def test_the_login_over_the_per_user_limit_revokes_that_users_oldest(make_app):
    _, client, clock = app_on_a_clock(make_app, REFRESH_TOKENS_PER_USER="2")
    tokens = []
    for _ in range(2):
        tokens.append(login(client, "alice")["refreshToken"])
        clock.advance(1)
    bob = login(client, "bob")["refreshToken"]
    assert [refresh(client, token).status_code for token in tokens] == [200, 200]  # at the limit
    tokens.append(login(client, "alice")["refreshToken"])  # one over it
    assert_unauthorized(refresh(client, tokens[0]))
    assert [refresh(client, token).status_code for token in tokens[1:]] == [200, 200]
    assert refresh(client, bob, "bob").status_code == 200


def test_a_session_the_limit_ends_is_a_security_event_and_a_note_on_the_login(
    make_app, capfd, caplog
):
    _, client, clock = app_on_a_clock(make_app, REFRESH_TOKENS_PER_USER="1")
    login(client, "alice")
    clock.advance(1)
    capfd.readouterr()
    with caplog.at_level(logging.INFO, logger="app.sessions.ending"):
        login(client, "alice")
    (line,) = [json.loads(text) for text in capfd.readouterr().out.splitlines()]
    assert (line["event"], line["user"], line["sessions_ended"]) == ("login", "alice", "1")
    (record,) = [r for r in caplog.records if getattr(r, "event", None) == "session_ended"]
    assert record.user == "alice"
    capfd.readouterr()
    login(client, "bob")  # a login under the limit ends nothing, and says nothing of it
    (line,) = [json.loads(text) for text in capfd.readouterr().out.splitlines()]
    assert "sessions_ended" not in line


def test_four_same_second_logins_over_a_limit_of_three_revoke_the_first(make_app):
    _, client, _ = app_on_a_clock(make_app, REFRESH_TOKENS_PER_USER="3")  # a frozen clock
    for _ in range(20):
        tokens = [login(client, "alice")["refreshToken"] for _ in range(4)]
        assert [refresh(client, token).status_code for token in tokens] == [401, 200, 200, 200]
        assert client.application.test_cli_runner().invoke(args=["tokens", "revoke-user", "alice"])


def test_without_a_per_user_limit_every_login_stays_valid(make_app):
    _, client, _ = app_on_a_clock(make_app)
    tokens = [login(client, "alice")["refreshToken"] for _ in range(12)]
    assert all(refresh(client, token).status_code == 200 for token in tokens)


def test_a_refresh_token_is_401_from_the_end_of_its_lifetime(make_app):
    _, client, clock = app_on_a_clock(make_app, REFRESH_TOKEN_LIFETIME="60")
    token = login(client)["refreshToken"]
    clock.advance(59)
    assert refresh(client, token).status_code == 200
    clock.advance(1)
    assert_unauthorized(refresh(client, token))
    clock.advance(1)  # one second after its lifetime
    assert_unauthorized(refresh(client, token))


def test_without_a_lifetime_a_refresh_token_is_valid_until_revoked(make_app):
    _, client, clock = app_on_a_clock(make_app)
    token = login(client)["refreshToken"]
    clock.advance(10 * 365 * 86_400)
    assert refresh(client, token).status_code == 200


def test_with_rotation_the_lifetime_counts_from_the_login(make_app):
    _, client, clock = app_on_a_clock(
        make_app, REFRESH_TOKEN_LIFETIME="60", REFRESH_TOKEN_ROTATION="true"
    )
    token = login(client)["refreshToken"]
    clock.advance(50)
    successor = rotated(client, token)
    clock.advance(9)
    successor = rotated(client, successor)
    clock.advance(1)  # 60 s after the login
    assert_unauthorized(refresh(client, successor))


def test_tokens_count_and_list_leave_expired_tokens_out(make_app):
    app, client, clock = app_on_a_clock(make_app, REFRESH_TOKEN_LIFETIME="60")
    login(client, "alice")
    clock.advance(30)
    young = login(client, "alice")["refreshToken"]
    clock.advance(30)
    runner = app.test_cli_runner()
    assert runner.invoke(args=["tokens", "count"]).stdout == "1\n"
    listed = runner.invoke(args=["tokens", "list", "alice"]).stdout.splitlines()
    assert [line[:12] for line in listed] == [token_digest(young)[:12]]


@pytest.mark.parametrize(
    ("setting", "value"),
    [("REFRESH_TOKENS_PER_USER", "1"), ("REFRESH_TOKEN_LIFETIME", "60")],
)
def test_the_spec_answers_hold_with_each_setting_on(make_app, setting, value):
    _, client, _ = app_on_a_clock(make_app, **{setting: value})
    tokens = login(client)
    assert len(tokens["refreshToken"]) == 42
    response = refresh(client, tokens["refreshToken"])
    assert set(response.get_json()) == {"accessToken"}
    assert_unauthorized(refresh(client, "x" * 42))
