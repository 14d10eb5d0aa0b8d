"""Logging out everywhere reaches access tokens: the cut-off at the protected routes and
at /auth/check, both sides of its second at login and refresh, no store read per
request, the idle timeout at POST /token, and USERS_FILE changes (docs/sessions.md)."""

from __future__ import annotations

import json
import logging
import os

import pytest

from app.auth.tokens import new_refresh_token
from app.auth.users import HASHER, change_users
from app.backends.interface import LoginClient
from tests.helpers.clock import ManualClock
from tests.helpers.metrics import scrape, value
from tests.helpers.oauth import register
from tests.helpers.tokens import bearer, login

#: A whole second: tokens minted now carry it exactly.
START = 1_800_000_000.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


def log_out_everywhere(app, username: str = "alice") -> int:
    with app.app_context():
        from app.sessions.ending import log_out_everywhere as end_all

        return end_all(username)


def request_lines(capfd) -> list[dict]:
    out = capfd.readouterr().out.splitlines()
    return [json.loads(line) for line in out if '"logger":"request"' in line.replace(" ", "")]


def check(client, token: str) -> int:
    return client.get("/auth/check", headers=bearer(token)).status_code


def test_an_access_token_issued_by_the_cutoff_is_401_at_protected_routes_and_the_gateway(
    make_app, clock, capfd
):
    app = make_app(clock=clock)
    client = app.test_client()
    old, bobs = login(client)["accessToken"], login(client, "bob")["accessToken"]
    clock.advance(1.5)
    assert log_out_everywhere(app) == 1
    capfd.readouterr()
    response = client.get("/user-accessible", headers=bearer(old))
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert check(client, old) == 401
    lines = [json.loads(line) for line in capfd.readouterr().out.splitlines() if line[:1] == "{"]
    assert [line["reason"] for line in lines] == ["logged_out_everywhere"] * 2
    assert client.get("/user-accessible", headers=bearer(bobs)).status_code == 200
    clock.advance(0.5)  # the next second: a new login is not refused
    new = login(client)["accessToken"]
    assert client.get("/user-accessible", headers=bearer(new)).status_code == 200
    assert check(client, new) == 200


def test_an_expired_and_a_cut_off_token_get_the_same_answer(make_app, clock):
    app = make_app(clock=clock, ACCESS_TOKEN_LIFETIME="60", CLOCK_SKEW="0")
    client = app.test_client()
    expired = login(client, "bob")["accessToken"]
    clock.advance(61)
    cut_off = login(client)["accessToken"]
    log_out_everywhere(app)
    answers = [client.get("/user-accessible", headers=bearer(t)) for t in (expired, cut_off)]
    shown = [(a.status_code, a.headers["WWW-Authenticate"], a.data) for a in answers]
    assert shown[0] == shown[1]
    assert shown[0][0] == 401


def test_a_login_in_the_cutoffs_second_waits_for_the_next(make_app, clock):
    app = make_app(clock=clock)
    client = app.test_client()
    before = login(client)["accessToken"]  # minted in the cut-off's second, before it
    log_out_everywhere(app)
    assert clock() == START
    after = login(client)  # the same second: waits it out
    assert clock() == START + 1
    assert client.get("/user-accessible", headers=bearer(before)).status_code == 401
    assert client.get("/user-accessible", headers=bearer(after["accessToken"])).status_code == 200
    refreshed = client.post(
        "/token", json={"username": "alice", "refreshToken": after["refreshToken"]}
    )
    assert refreshed.status_code == 200
    assert clock() == START + 1  # a second after the cut-off: no wait


@pytest.mark.parametrize("rotation", ["false", "true"])
def test_a_refresh_in_the_cutoffs_second_waits_for_the_next(make_app, clock, rotation):
    app = make_app(clock=clock, REFRESH_TOKEN_ROTATION=rotation)
    client = app.test_client()
    log_out_everywhere(app)
    refresh_token = new_refresh_token()  # a login of that second, after the logout
    app.extensions["token_store"].issue(refresh_token, "alice")
    response = client.post("/token", json={"username": "alice", "refreshToken": refresh_token})
    assert response.status_code == 200
    assert clock() == START + 1
    token = response.get_json()["accessToken"]
    assert client.get("/user-accessible", headers=bearer(token)).status_code == 200
    second = response.get_json().get("refreshToken", refresh_token)
    response = client.post("/token", json={"username": "alice", "refreshToken": second})
    assert response.status_code == 200
    assert clock() == START + 1  # the second after: no wait


class CountingStore:
    """The app's store, counting its reads of the cut-offs."""

    def __init__(self, store) -> None:
        self.store, self.reads = store, 0

    def cutoffs(self, newer_than: int) -> dict[str, int]:
        self.reads += 1
        return self.store.cutoffs(newer_than)


def test_the_protected_routes_read_no_store_per_request(make_app, clock):
    app = make_app(clock=clock, SESSION_CUTOFF_REFRESH="5")
    counting = CountingStore(app.extensions["token_store"])
    app.extensions["session_cutoffs"].store = counting
    client = app.test_client()
    token = login(client)["accessToken"]
    for _ in range(20):
        assert client.get("/user-accessible", headers=bearer(token)).status_code == 200
        assert check(client, token) == 200
    assert counting.reads == 1
    clock.advance(4.9)
    client.get("/user-accessible", headers=bearer(token))
    assert counting.reads == 1
    clock.advance(0.1)
    client.get("/user-accessible", headers=bearer(token))
    assert counting.reads == 2


def test_a_logout_everywhere_on_another_worker_is_seen_within_the_refresh(make_app, clock):
    here, there = make_app(clock=clock), make_app(clock=clock)  # two workers, one store
    token = login(here.test_client())["accessToken"]
    client = here.test_client()
    assert client.get("/user-accessible", headers=bearer(token)).status_code == 200
    clock.advance(1)
    log_out_everywhere(there)
    assert client.get("/user-accessible", headers=bearer(token)).status_code == 200  # not yet
    clock.advance(5)
    assert client.get("/user-accessible", headers=bearer(token)).status_code == 401


def test_a_login_records_its_client(make_app, clock):
    app = make_app(clock=clock)
    login(app.test_client(), headers={"User-Agent": "<img src=x onerror=alert(1)>" * 20})
    (session,) = app.extensions["token_store"].sessions_of("alice").sessions
    assert session.address == "127.0.0.1"
    expected = LoginClient("", "<img src=x onerror=alert(1)>" * 20).kept().user_agent
    assert session.user_agent == expected
    assert len(session.user_agent) == 256


@pytest.mark.parametrize("rotation", ["false", "true"])
def test_an_idle_session_is_refused_at_post_token(make_app, clock, rotation, capfd):
    app = make_app(clock=clock, REFRESH_TOKEN_IDLE_TIMEOUT="600", REFRESH_TOKEN_ROTATION=rotation)
    client = app.test_client()
    refresh_token = login(client)["refreshToken"]
    clock.advance(599)
    response = client.post("/token", json={"username": "alice", "refreshToken": refresh_token})
    assert response.status_code == 200
    refresh_token = response.get_json().get("refreshToken", refresh_token)
    clock.advance(600 + 60)  # unused since a minute that long ago
    capfd.readouterr()
    response = client.post("/token", json={"username": "alice", "refreshToken": refresh_token})
    assert response.status_code == 401
    assert app.extensions["token_store"].count() == 0
    (line,) = request_lines(capfd)  # the end of a session: a security event
    assert (line["event"], line["reason"], line["user"]) == (
        "session_ended",
        "idle_session",
        "alice",
    )
    samples = scrape(client)
    assert value(samples, "token_service_auth_failures_total", reason="idle_session") == 1
    assert value(samples, "token_service_tokens_total", event="revoked") == 1
    response = client.post("/token", json={"username": "alice", "refreshToken": refresh_token})
    assert response.status_code == 401  # gone: unknown from now on
    assert request_lines(capfd)[-1]["reason"] == "unknown_refresh_token"


def test_an_idle_session_ends_as_a_security_event_at_the_oauth_refresh_grant(
    make_app, clock, capfd, tmp_path
):
    clients_file = tmp_path / "clients.json"
    register(clients_file, "reports")  # the grant asks for none: a public client's refresh
    app = make_app(clock=clock, REFRESH_TOKEN_IDLE_TIMEOUT="600", CLIENTS_FILE=str(clients_file))
    client = app.test_client()
    refresh_token = login(client)["refreshToken"]
    clock.advance(600 + 60)
    capfd.readouterr()
    response = client.post(
        "/oauth/token", data={"grant_type": "refresh_token", "refresh_token": refresh_token}
    )
    assert (response.status_code, response.get_json()["error"]) == (400, "invalid_grant")
    (line,) = request_lines(capfd)
    assert (line["event"], line["reason"], line["user"]) == (
        "session_ended",
        "idle_session",
        "alice",
    )
    assert app.extensions["token_store"].count() == 0


def test_a_password_changed_in_users_file_logs_the_user_out_everywhere(make_app, tmp_path):
    clock = ManualClock()
    users = tmp_path / "users.json"
    users.write_text(json.dumps({"alice": HASHER.hash("old password")}))
    app = make_app(clock=clock, USERS_FILE=str(users))
    client = app.test_client()
    body = {"username": "alice", "password": "old password"}
    old = client.post("/login", json=body).get_json()
    clock.advance(2)
    change_users(str(users), lambda u: u.update(alice=HASHER.hash("new password")) or True)
    clock.advance(1)  # the reload interval: the next look reads the file again
    response = client.post("/login", json={"username": "alice", "password": "new password"})
    assert response.status_code == 200
    new = response.get_json()
    assert client.get("/user-accessible", headers=bearer(old["accessToken"])).status_code == 401
    assert (
        client.post(
            "/token", json={"username": "alice", **{"refreshToken": old["refreshToken"]}}
        ).status_code
        == 401
    )
    # another worker reads the change later: the login with the new password stays
    other = make_app(clock=clock, USERS_FILE=str(users))
    assert other.extensions["token_store"].owner_of(new["refreshToken"]) == "alice"
    assert (
        other.test_client().get("/user-accessible", headers=bearer(new["accessToken"])).status_code
        == 200
    )


def test_a_change_made_while_users_file_was_missing_still_logs_the_users_out(make_app, tmp_path):
    clock = ManualClock()
    users = tmp_path / "users.json"
    users.write_text(json.dumps({"alice": HASHER.hash("old"), "bob": HASHER.hash("bob's")}))
    app = make_app(clock=clock, USERS_FILE=str(users))
    client = app.test_client()
    alice = client.post("/login", json={"username": "alice", "password": "old"}).get_json()
    bob = client.post("/login", json={"username": "bob", "password": "bob's"}).get_json()
    clock.advance(2)
    users.rename(tmp_path / "users.json.bak")  # mv users.json away, then put a new one
    client.post("/login", json={"username": "alice", "password": "old"})  # a look: none
    clock.advance(2)
    users.write_text(json.dumps({"alice": HASHER.hash("new")}))  # a new password, bob gone
    clock.advance(2)
    assert client.post("/login", json={"username": "alice", "password": "new"}).status_code == 200
    for tokens in (alice, bob):
        access = client.get("/user-accessible", headers=bearer(tokens["accessToken"]))
        assert access.status_code == 401
    refresh = {"username": "alice", "refreshToken": alice["refreshToken"]}
    assert client.post("/token", json=refresh).status_code == 401


def test_a_users_file_edited_by_hand_refuses_the_old_tokens_with_no_login_to_read_it(
    make_app, tmp_path
):
    clock = ManualClock()
    users = tmp_path / "users.json"
    users.write_text(json.dumps({"alice": HASHER.hash("old password")}))
    app = make_app(clock=clock, USERS_FILE=str(users), SESSION_CUTOFF_REFRESH="5")
    client = app.test_client()
    old = client.post("/login", json={"username": "alice", "password": "old password"})
    token = old.get_json()["accessToken"]
    clock.advance(2)
    # an operator's edit (rsync, configuration management): no flask users, and after it
    # only protected traffic, which reads no password
    change_users(str(users), lambda u: u.update(alice=HASHER.hash("new password")) or True)
    assert client.get("/user-accessible", headers=bearer(token)).status_code == 200
    clock.advance(5)  # the cut-offs' refresh, which looks at the file first
    assert client.get("/user-accessible", headers=bearer(token)).status_code == 401
    assert check(client, token) == 401
    refreshed = client.post("/token", json={"username": "alice", **old.get_json()})
    assert refreshed.status_code == 401


@pytest.mark.parametrize("shift", [-3600, 3600], ids=["copied-with-its-old-mtime", "future-mtime"])
def test_a_users_file_whose_mtime_cannot_be_the_change_s_logs_out_as_of_now(
    make_app, tmp_path, shift
):
    clock = ManualClock()
    users = tmp_path / "users.json"
    users.write_text(json.dumps({"alice": HASHER.hash("old password")}))
    app = make_app(clock=clock, USERS_FILE=str(users))
    client = app.test_client()
    old = client.post("/login", json={"username": "alice", "password": "old password"})
    old = old.get_json()
    clock.advance(2)
    change_users(str(users), lambda u: u.update(alice=HASHER.hash("new password")) or True)
    os.utime(users, (clock() + shift, clock() + shift))
    clock.advance(1)  # the reload interval: the next login reads the file again
    new = client.post("/login", json={"username": "alice", "password": "new password"})
    assert new.status_code == 200
    assert client.get("/user-accessible", headers=bearer(old["accessToken"])).status_code == 401
    refreshed = client.post(
        "/token", json={"username": "alice", "refreshToken": old["refreshToken"]}
    )
    assert refreshed.status_code == 401
    headers = bearer(new.get_json()["accessToken"])
    assert client.get("/user-accessible", headers=headers).status_code == 200


def test_every_end_of_a_session_is_a_security_event(make_app, clock, caplog):
    from app.http.request_log import NOTES_KEY
    from app.sessions.ending import end_session

    app = make_app(clock=clock)
    client = app.test_client()
    login(client)
    login(client)
    store = app.extensions["token_store"]
    first, second = (s.id for s in store.sessions_of("alice").sessions)
    notes: dict[str, str] = {}
    with app.test_request_context(environ_base={NOTES_KEY: notes}):
        assert end_session("alice", first)
    assert notes == {"event": "session_ended"}
    notes.clear()
    with app.test_request_context(environ_base={NOTES_KEY: notes}):
        assert not end_session("bob", second)  # not bob's: nothing ended, no event
    assert notes == {}
    with app.app_context(), caplog.at_level(logging.INFO, logger="app.sessions.ending"):
        assert end_session("alice", second)  # a command's: an app line
        log_out_everywhere(app)
    assert [(r.event, r.user) for r in caplog.records] == [
        ("session_ended", "alice"),
        ("logged_out_everywhere", "alice"),
    ]
