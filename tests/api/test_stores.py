"""The API on the stores other than SQLite: one walk, on Redis and on PostgreSQL, through
each behaviour that reads or writes the store or the limits' counters.

The API's own suites run on SQLite, and the stores' contracts on every backend
(tests/backends/); this file sees, once on each other store, what the app makes of it:
logins and refreshes, rotation and a reused token revoking its family, revokes, logouts
of a cookie token (at /api/v1/me and at the gateway's /auth/check), the per-address rate
limit, the per-username failed-login limit, readiness and the operator commands.
"""

from __future__ import annotations

import pytest

from app.auth.tokens import issue_cookie_token
from app.extensions import KEY_RING
from tests.helpers.limits import from_address, log_in
from tests.helpers.tokens import bearer, login
from tests.helpers.users import write_users

pytestmark = pytest.mark.store("redis", "postgresql")

USER = {"source": "corp", "id": "248289761001", "shownName": "Jane Doe"}
PASSWORD = "correct horse battery"


def refresh(client, refresh_token: str, username: str = "alice"):
    return client.post("/token", json={"username": username, "refreshToken": refresh_token})


def assert_unauthorized(response) -> None:
    assert (response.status_code, response.data) == (401, b"Unauthorized")


def test_a_login_calls_the_protected_routes_and_refreshes_until_revoked(client):
    assert client.get("/readyz").status_code == 200
    tokens = login(client, "alice")
    access, token = bearer(tokens["accessToken"]), tokens["refreshToken"]
    assert client.get("/user-accessible", headers=access).status_code == 200
    assert client.get("/admin-accessible", headers=access).status_code == 403
    assert client.get("/auth/check", headers=access).status_code == 200
    assert client.get("/auth/check?role=admin", headers=access).status_code == 403
    for _ in range(2):  # without rotation the token stays, and is never replaced
        response = refresh(client, token)
        assert response.status_code == 200
        assert set(response.get_json()) == {"accessToken"}
    assert_unauthorized(refresh(client, token, "bob"))  # another user's
    response = client.delete(f"/token/{token}")
    assert (response.status_code, response.data) == (204, b"")
    assert_unauthorized(refresh(client, token))
    assert client.delete(f"/token/{token}").status_code == 204  # again: nothing to say


def test_rotation_replaces_the_token_and_a_reused_one_revokes_its_family(make_app):
    client = make_app(REFRESH_TOKEN_ROTATION="true").test_client()
    first = login(client, "alice")["refreshToken"]
    other_login = login(client, "alice")["refreshToken"]
    response = refresh(client, first)
    assert response.status_code == 200
    successor = response.get_json()["refreshToken"]
    assert successor != first
    newest = refresh(client, successor).get_json()["refreshToken"]
    assert_unauthorized(refresh(client, first))  # a reuse of a rotated token
    assert_unauthorized(refresh(client, newest))  # its family is revoked
    assert refresh(client, other_login).status_code == 200  # another login is not
    live = login(client, "alice")["refreshToken"]
    assert client.delete(f"/token/{live}").status_code == 204
    assert_unauthorized(refresh(client, live))


def test_a_logged_out_cookie_token_is_401_on_every_app_of_the_store(make_app):
    first, second = make_app(AUTH_CHECK_COOKIE="on"), make_app(AUTH_CHECK_COOKIE="on")
    token = issue_cookie_token(USER, first.extensions[KEY_RING], 600)
    other = issue_cookie_token({**USER, "id": "42"}, first.extensions[KEY_RING], 600)
    for app in (first, second):
        client = app.test_client()
        client.set_cookie("jwt", token)
        assert client.get("/api/v1/me").get_json() == USER
        assert client.get("/auth/check").status_code == 200
    client = first.test_client()
    client.set_cookie("jwt", token)
    assert client.post("/auth/logout").status_code == 204
    for app in (first, second):  # two workers or hosts on one store
        client = app.test_client()
        client.set_cookie("jwt", token)
        assert_unauthorized(client.get("/api/v1/me"))
        assert client.get("/auth/check").status_code == 401
        client.set_cookie("jwt", other)
        assert client.get("/api/v1/me").status_code == 200


def test_the_rate_limit_counts_each_address_on_every_app_of_the_store(make_app):
    one, other = (make_app(RATE_LIMIT_AUTH="3 per minute").test_client() for _ in range(2))
    answers = [log_in(client, "203.0.113.7").status_code for client in (one, other, one, other)]
    assert answers == [200, 200, 200, 429]
    body = {"username": "alice", "refreshToken": "x" * 42}
    refreshes = [c.post("/token", json=body, **from_address()) for c in (one, other, one, other)]
    assert [answer.status_code for answer in refreshes] == [401, 401, 401, 429]  # its own count
    assert log_in(other, "198.51.100.9").status_code == 200  # another address, its own


def test_the_failed_login_limit_counts_a_username_on_every_app_of_the_store(make_app, tmp_path):
    users_file = tmp_path / "users.json"
    write_users(users_file, alice=PASSWORD, bob=PASSWORD)
    settings = {"USERS_FILE": str(users_file), "RATE_LIMIT_AUTH": "off"}
    one, other = (make_app(**settings).test_client() for _ in range(2))

    def attempt(client, username: str, password: str) -> int:
        body = {"username": username, "password": password}
        return client.post("/login", json=body).status_code

    for n in range(10):  # the default: 10 failures a minute
        assert attempt(one if n % 2 else other, "alice", f"guess {n}") == 401
    assert attempt(one, "alice", PASSWORD) == 429
    assert attempt(other, "alice", PASSWORD) == 429
    assert attempt(other, "bob", PASSWORD) == 200  # another username, its own count


def test_the_operator_commands_see_and_revoke_the_stored_tokens(app, client, runner):
    tokens = [login(client, username)["refreshToken"] for username in ("alice", "alice", "bob")]
    assert runner.invoke(args=["tokens", "count"]).stdout == "3\n"
    listed = runner.invoke(args=["tokens", "list", "alice"])
    assert listed.exit_code == 0
    assert len(listed.stdout.splitlines()) == 2
    assert runner.invoke(args=["tokens", "revoke-user", "alice"]).exit_code == 0
    assert [refresh(client, token).status_code for token in tokens[:2]] == [401, 401]
    assert refresh(client, tokens[2], "bob").status_code == 200
    assert runner.invoke(args=["tokens", "count"]).stdout == "1\n"
