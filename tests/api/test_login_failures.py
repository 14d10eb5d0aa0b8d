"""LOGIN_FAILURE_LIMIT: failed password checks per username, counted before Argon2 is spent,
the same for known and unknown usernames, shared by every worker and host."""

from __future__ import annotations

import json
import logging
import secrets
import sqlite3
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
import redis
from argon2 import PasswordHasher
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.auth.users import HASHER
from app.backends.sqlite.counters import COUNTERS_FILE_NAME
from app.views.auth import LOGIN_LIMITED_MESSAGE
from tests.helpers.clock import ManualClock
from tests.helpers.openapi import assert_documented, document_of

PASSWORD = "correct horse battery"
#: Another hash of the same password (a new salt), made once: an Argon2id hash takes a while.
ANOTHER_HASH = HASHER.hash(PASSWORD)
WRONG = "not the password"
LIMIT = 10


@pytest.fixture
def users_file(tmp_path):
    folder = tmp_path / "users"
    folder.mkdir()
    path = folder / "users.json"
    path.write_text(json.dumps({"alice": HASHER.hash(PASSWORD), "bob": HASHER.hash(PASSWORD)}))
    return path


@pytest.fixture
def limited_app(make_app, users_file):
    """Return a factory of apps with alice and bob (PASSWORD); no per-address limit, so
    that only the per-username one refuses."""

    def make(**settings):
        return make_app(USERS_FILE=str(users_file), RATE_LIMIT_AUTH="off", **settings)

    return make


@pytest.fixture
def one_limited_app(limited_app):
    """Return one app of ``limited_app``'s, for a property whose examples only read it: an
    app per example would hash its users' passwords again each time."""
    return limited_app()


class CountingHasher:
    """The directory's hasher, counting its verifications (each one an Argon2 check)."""

    def __init__(self, hasher: PasswordHasher) -> None:
        self.hasher = hasher
        self.verified = 0

    def verify(self, hashed: str, password: str) -> bool:
        self.verified += 1
        return self.hasher.verify(hashed, password)

    def check_needs_rehash(self, hashed: str) -> bool:
        return self.hasher.check_needs_rehash(hashed)


def spied(client) -> CountingHasher:
    directory = client.application.extensions["user_directory"]
    directory.hasher = spy = CountingHasher(directory.hasher)
    return spy


def log_in(client, username: str = "alice", password: str = WRONG, **kwargs):
    return client.post("/login", json={"username": username, "password": password}, **kwargs)


def fail(client, username: str = "alice", times: int = LIMIT) -> None:
    for _ in range(times):
        assert log_in(client, username).status_code == 401


def answer(response) -> tuple:
    """Return what a client sees of an answer, but the request id."""
    headers = sorted((k, v) for k, v in response.headers.items() if k != "X-Request-ID")
    return response.status_code, response.data, headers


def request_lines(capfd) -> list[dict]:
    return [json.loads(line) for line in capfd.readouterr().out.splitlines() if line[:1] == "{"]


def test_without_a_user_directory_or_when_off_there_is_no_limit(make_app, limited_app):
    assert make_app().extensions["login_failure_limit"] is None
    client = limited_app(LOGIN_FAILURE_LIMIT="off").test_client()
    assert client.application.extensions["login_failure_limit"] is None
    fail(client, times=LIMIT + 5)
    assert log_in(client, password=PASSWORD).status_code == 200


# --- the limit --------------------------------------------------------------------------


def test_after_10_failures_even_the_right_password_is_429_for_that_username_only(
    limited_app, capfd
):
    client = limited_app().test_client()
    fail(client)
    capfd.readouterr()
    response = log_in(client, password=PASSWORD)
    assert response.status_code == 429
    assert response.get_json() == {"message": LOGIN_LIMITED_MESSAGE}
    assert 1 <= int(response.headers["Retry-After"]) <= 60
    assert response.headers["Cache-Control"] == "no-store"
    (line,) = request_lines(capfd)
    assert (line["status"], line["reason"], line["event"], line["user"]) == (
        429,
        "login_limited",
        "login_limited",
        None,
    )
    assert log_in(client, "bob", PASSWORD).status_code == 200  # another username: unaffected
    assert log_in(client, "Alice").status_code == 401  # names are exact: another username


@pytest.mark.store("sqlite")  # the SQLite counters follow the app's clock; Redis keeps its own
def test_a_known_and_an_unknown_username_get_the_same_answers(limited_app):
    client = limited_app(clock=ManualClock()).test_client()  # the same Retry-After for both
    known = [answer(log_in(client, "alice")) for _ in range(LIMIT + 2)]
    unknown = [answer(log_in(client, "mallory")) for _ in range(LIMIT + 2)]
    assert known == unknown
    assert [status for status, _, _ in known] == [401] * LIMIT + [429] * 2


def test_no_argon2_check_is_spent_over_the_limit(limited_app):
    client = limited_app().test_client()
    spy = spied(client)
    fail(client, "alice")
    fail(client, "mallory")  # an unknown user costs the dummy hash's check, until limited
    assert spy.verified == 2 * LIMIT
    for username in ("alice", "mallory"):
        assert log_in(client, username, PASSWORD).status_code == 429
    assert spy.verified == 2 * LIMIT  # neither the user's hash nor the dummy's


def test_a_successful_login_takes_its_attempt_back(limited_app):
    client = limited_app().test_client(use_cookies=False)  # no device cookie: the username's
    fail(client, times=LIMIT - 1)
    for _ in range(3):  # only failures count: logging in often is no offence
        assert log_in(client, password=PASSWORD).status_code == 200
    assert log_in(client).status_code == 401  # the 10th failure
    assert log_in(client, password=PASSWORD).status_code == 429


@pytest.mark.store("sqlite")
def test_the_window_frees_when_it_ends(limited_app):
    clock = ManualClock()
    client = limited_app(clock=clock).test_client()
    fail(client)
    clock.advance(30)
    response = log_in(client, password=PASSWORD)
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "30"
    clock.advance(30)  # the window, started by the first failure, has ended
    assert log_in(client, password=PASSWORD).status_code == 200
    fail(client)  # a new window: ten more
    assert log_in(client).status_code == 429


def test_apps_sharing_the_counters_share_the_limit(limited_app):
    """Two apps (two workers, or two hosts on one store) share one count."""
    one, other = (limited_app().test_client() for _ in range(2))
    for n in range(LIMIT):
        assert log_in(one if n % 2 else other).status_code == 401
    assert log_in(one, password=PASSWORD).status_code == 429
    assert log_in(other, password=PASSWORD).status_code == 429


@pytest.mark.store("redis", "postgresql")  # the stores that hosts share
@pytest.mark.parametrize("signing_algorithm", ["EdDSA", "ES256"], indirect=True)
def test_hosts_with_one_key_file_and_secrets_of_their_own_share_the_limit(limited_app, signing_key):
    """With a key pair, SIGNING_SECRET only keys the login state cookie: unset, each host
    generates its own. The counters are keyed by the key file every host shares."""
    assert signing_key.key_file is not None
    one, other = (
        limited_app(SIGNING_SECRET=secrets.token_urlsafe(48)).test_client() for _ in range(2)
    )
    for n in range(LIMIT):
        assert log_in(one if n % 2 else other).status_code == 401
    assert log_in(one, password=PASSWORD).status_code == 429
    assert log_in(other, password=PASSWORD).status_code == 429


# --- device cookies --------------------------------------------------------------------


def device_cookie(response) -> str:
    """Return the device cookie a login set, after checking its attributes."""
    (header,) = [h for h in response.headers.getlist("Set-Cookie") if h.startswith("login_device=")]
    value, *attributes = [part.strip() for part in header.split(";")]
    assert sorted(attributes) == sorted(
        ["Secure", "HttpOnly", "Path=/login", "SameSite=Strict", f"Max-Age={365 * 24 * 3600}"]
        + [a for a in attributes if a.startswith("Expires=")]
    )
    return value.partition("=")[2]


def with_device(value: str) -> dict:
    """The cookie as a browser sends it back (to a client made with use_cookies=False)."""
    return {"headers": {"Cookie": f"login_device={value}"}}


def test_a_browser_its_user_logged_in_with_gets_in_while_guessers_lock_the_username(
    limited_app,
):
    """Two hosts: the cookie one set is good on the other, and only for its username."""
    owner, guesser = (limited_app().test_client(use_cookies=False) for _ in range(2))
    alices = device_cookie(log_in(owner, password=PASSWORD))
    bobs = device_cookie(log_in(owner, "bob", PASSWORD))
    fail(guesser)
    assert log_in(guesser, password=PASSWORD).status_code == 429  # no cookie: locked
    assert log_in(guesser, password=PASSWORD, **with_device(bobs)).status_code == 429
    response = log_in(guesser, password=PASSWORD, **with_device(alices))
    assert response.status_code == 200
    assert device_cookie(response) != alices  # a new one at each login


def test_a_device_cookie_s_failures_count_on_its_own_counters(limited_app):
    client = limited_app().test_client(use_cookies=False)
    cookie = device_cookie(log_in(client, password=PASSWORD))
    for _ in range(LIMIT):
        assert log_in(client, **with_device(cookie)).status_code == 401
    assert log_in(client, password=PASSWORD, **with_device(cookie)).status_code == 429
    other = device_cookie(log_in(client, password=PASSWORD))  # the username's: untouched
    assert log_in(client, password=PASSWORD, **with_device(other)).status_code == 200


def test_a_new_password_ends_the_device_cookies_of_the_old_one(limited_app, users_file):
    """A thief who logged in with a stolen password, however often, keeps no cookie that
    outlives the reset: their guesses at the new one count on the username's counters."""
    clock = ManualClock()
    app = limited_app(clock=clock)
    client = app.test_client(use_cookies=False)
    thiefs = [device_cookie(log_in(client, password=PASSWORD)) for _ in range(2)]
    result = app.test_cli_runner().invoke(
        args=["users", "add", "--replace", "alice"], input="the new password\n"
    )
    assert result.exit_code == 0, result.output
    clock.advance(1)  # the file read again
    owners = device_cookie(log_in(client, password="the new password"))
    fail(client)  # the username's counters, full
    for cookie in thiefs:
        assert log_in(client, **with_device(cookie)).status_code == 429
    assert log_in(client, password="the new password", **with_device(owners)).status_code == 200


def test_no_device_cookie_without_a_password_check(limited_app, make_app):
    assert "Set-Cookie" not in log_in(limited_app().test_client()).headers  # a failure
    open_login = make_app().test_client().post("/login", json={"username": "alice"})
    assert "Set-Cookie" not in open_login.headers
    off = limited_app(LOGIN_FAILURE_LIMIT="off").test_client()
    assert "Set-Cookie" not in log_in(off, password=PASSWORD).headers


@pytest.mark.store("sqlite")  # the cookie's check does not depend on the store
@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_a_cookie_no_login_of_the_username_was_given_opens_nothing(one_limited_app, data):
    """Forged, altered, another username's, or any text: the username's counters count it."""
    app = one_limited_app
    failures = app.extensions["login_failure_limit"]
    hashed = app.extensions["user_directory"].hash_of("alice")
    good = failures.device_cookie("alice", hashed)
    nonce, _, mac = good.partition(".")
    cookie = data.draw(
        st.one_of(
            st.text(max_size=60),
            st.from_regex(r"[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{22}", fullmatch=True),
            st.just(failures.device_cookie("bob", hashed)),
            st.just(failures.device_cookie("alice ", hashed)),
            st.just(failures.device_cookie("alice", ANOTHER_HASH)),
            st.builds(lambda m: f"{nonce}.{m}", st.text(min_size=22, max_size=22)),
            st.just(f"{nonce}.{mac}="),
        )
    )
    assert cookie != good
    assert failures.device_of("alice", hashed, cookie) is None
    assert failures.device_of("alice", hashed, good) == nonce
    assert failures.device_of("alice", None, good) is None  # no such user (any more)


def test_the_device_cookie_is_not_secure_with_auth_cookie_secure_off(limited_app):
    response = log_in(limited_app(AUTH_COOKIE_SECURE="false").test_client(), password=PASSWORD)
    assert "Secure" not in response.headers["Set-Cookie"]


def test_the_counters_never_hold_the_username(limited_app, instance_path, store_backend):
    client = limited_app().test_client()
    log_in(client, "my-password-typed-as-name")
    if store_backend is None:  # SQLite: the counters' own file
        with sqlite3.connect(instance_path / COUNTERS_FILE_NAME) as connection:
            keys = [row[0] for row in connection.execute("SELECT key FROM rate_limits")]
    elif store_backend.startswith("postgresql://"):  # the store's database
        with psycopg.connect(store_backend) as connection:
            keys = [row[0] for row in connection.execute("SELECT key FROM rate_limits")]
    else:
        with redis.Redis.from_url(store_backend, decode_responses=True) as server:
            keys = [key for key in server.keys("*") if not key.startswith("rt:")]
    (key,) = keys
    prefix = "rl:login_failures/" if str(store_backend).startswith("redis") else "login_failures/"
    assert key.startswith(prefix)
    assert "my-password" not in key


def test_concurrent_guesses_are_held_to_the_limit(limited_app):
    client = limited_app().test_client()
    spy = spied(client)
    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = list(pool.map(lambda _: log_in(client).status_code, range(3 * LIMIT)))
    assert statuses.count(401) == LIMIT, statuses
    assert statuses.count(429) == 2 * LIMIT
    assert spy.verified == LIMIT


def test_the_429_matches_the_openapi_document(limited_app):
    client = limited_app().test_client()
    document = document_of(client)
    fail(client)
    assert_documented(document, "post", "/login", log_in(client))


# --- when the counters' storage fails: closed ------------------------------------------


@pytest.mark.store("sqlite")
def test_a_failing_counter_file_refuses_logins_with_503_and_no_argon2(
    limited_app, instance_path, caplog
):
    clock = ManualClock()
    client = limited_app(clock=clock).test_client()
    spy = spied(client)
    (instance_path / COUNTERS_FILE_NAME).mkdir()  # opened on first use: it cannot be
    caplog.set_level(logging.WARNING)
    for username, password in [("alice", PASSWORD), ("alice", "x"), ("mallory", "x")]:
        response = log_in(client, username, password)
        assert response.status_code == 503
        assert response.get_json() == {"message": "login is unavailable, try again shortly"}
        assert response.headers["Retry-After"] == "1"
    assert spy.verified == 0
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("app.limits")]
    assert len(messages) == 1
    assert messages[0].startswith("logins refused (503), the login failure limit's storage")
    metrics = client.get("/metrics").get_data(as_text=True)
    assert "token_service_rate_limit_errors_total 3.0" in metrics
    # the storage is back: once the second without tries has passed, logins work again
    (instance_path / COUNTERS_FILE_NAME).rmdir()
    clock.advance(2)
    assert log_in(client, password=PASSWORD).status_code == 200
    assert "logins accepted again" in caplog.records[-1].getMessage()
