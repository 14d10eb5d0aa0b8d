"""POST /auth/logout refuses the cookie token everywhere; it and the login start refuse others."""

from __future__ import annotations

import json
import time

import jwt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.auth import tokens
from app.auth.tokens import issue_access_token, issue_cookie_token, logout_digest
from app.backends.interface import token_digest
from app.extensions import KEY_RING, clock_of
from app.oidc.cross_site import origin_of
from tests.helpers.clock import ManualClock
from tests.helpers.servers import free_port
from tests.helpers.tokens import bearer, ecdsa_twin, make_token

USER = {"source": "corp", "id": "248289761001", "shownName": "Jane Doe"}
OTHER_USER = {"source": "corp", "id": "42", "shownName": "John Roe"}
EVIL = "https://evil.example"


def cookie_token(app, user=USER, lifetime: int = 600) -> str:
    return issue_cookie_token(user, app.extensions[KEY_RING], lifetime, clock_of(app))


def me(client, token: str):
    client.set_cookie("jwt", token)
    return client.get("/api/v1/me")


def logout(client, token: str | None = None, **headers: str):
    if token is not None:
        client.set_cookie("jwt", token)
    return client.post("/auth/logout", headers=headers)


def request_lines(capfd) -> list[dict]:
    return [json.loads(line) for line in capfd.readouterr().out.splitlines() if line[:1] == "{"]


# --- cross-site requests --------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": EVIL},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "cross-site", "Origin": EVIL},
        {"Sec-Fetch-Site": "same-site"},  # a sibling host: no Origin, nothing to trust
        {"Sec-Fetch-Site": "same-site", "Origin": "https://user-pages.localhost"},
        {"Sec-Fetch-Site": "none"},  # only a navigation is typed: never a POST
        {"Origin": "null"},  # a sandboxed page or a file
        {"Origin": "http://localhost:8080"},  # another port is another origin
        {"Origin": "https://localhost"},  # another scheme too
        {"Origin": "http://localhost:x"},
        {"Sec-Fetch-Site": "cross-site", "Origin": "http://[::1"},
    ],
)
@pytest.mark.store("sqlite")
def test_a_cross_site_logout_is_403_and_logs_nobody_out(app, client, capfd, headers):
    token = cookie_token(app)
    capfd.readouterr()
    response = logout(client, token, **headers)
    assert response.status_code == 403
    assert response.get_json() == {"message": "No access"}
    assert "Set-Cookie" not in response.headers
    (line,) = request_lines(capfd)
    assert (line["status"], line["reason"]) == (403, "cross_site")
    assert me(client, token).status_code == 200


@pytest.mark.parametrize(
    "headers",
    [
        {},  # curl, scripts/logout.sh
        {"Sec-Fetch-Site": "same-origin"},
        {"Sec-Fetch-Site": "same-origin", "Origin": "http://localhost"},
        {"Origin": "http://localhost"},  # the request's own scheme and host
        {"Origin": "HTTP://LOCALHOST:80"},
    ],
)
@pytest.mark.store("sqlite")
def test_a_same_origin_or_headerless_logout_is_204(app, client, headers):
    token = cookie_token(app)
    response = logout(client, token, **headers)
    assert response.status_code == 204
    assert client.get_cookie("jwt") is None
    assert me(client, token).status_code == 401


@pytest.mark.store("sqlite")
def test_the_public_url_and_the_login_redirect_are_the_trusted_origins(make_app):
    app = make_app(
        PUBLIC_URL="https://auth.example.com", LOGIN_REDIRECT_URL="https://app.example.com/home"
    )
    client = app.test_client()
    for origin, status in [
        ("https://auth.example.com", 204),
        ("https://auth.example.com:443", 204),
        ("https://app.example.com", 204),  # the front end the login leads to
        ("http://localhost", 403),  # the request's host no longer counts: PUBLIC_URL does
        ("https://user-pages.example.com", 403),
    ]:
        headers = {"Sec-Fetch-Site": "same-site", "Origin": origin}
        assert logout(client, cookie_token(app), **headers).status_code == status, origin


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Sec-Fetch-Site": "cross-site"}, 403),
        ({"Origin": EVIL}, 403),
        ({"Sec-Fetch-Site": "cross-site", "Origin": EVIL}, 403),
        ({"Sec-Fetch-Site": "same-origin"}, 404),
        ({"Sec-Fetch-Site": "none"}, 404),  # typed or bookmarked
        ({"Sec-Fetch-Site": "same-site"}, 404),  # a link from the site's front end
        ({}, 404),
    ],
)
@pytest.mark.store("sqlite")
def test_the_login_start_refuses_a_cross_site_request_before_anything_else(client, headers, status):
    # no provider is configured: what passes the check is the unknown provider's 404
    response = client.get("/auth/corp/login", headers=headers)
    assert response.status_code == status
    if status == 403:
        assert response.get_json() == {"message": "No access"}


# --- a logged-out cookie token -------------------------------------------------------


def test_a_logged_out_cookie_token_is_401_on_every_app_of_the_store(make_app, capfd):
    first, second = make_app(), make_app()  # two workers or hosts on one store
    token, others = cookie_token(first), cookie_token(first, OTHER_USER)
    client = first.test_client()
    assert me(second.test_client(), token).status_code == 200
    capfd.readouterr()
    assert logout(client, token).status_code == 204
    (line,) = request_lines(capfd)
    assert (line["event"], line["user"]) == ("logout", USER["id"])
    assert token not in json.dumps(line)
    for app in (first, second):
        response = me(app.test_client(), token)
        assert response.status_code == 401
        assert response.data == b"Unauthorized"
        assert me(app.test_client(), others).get_json() == OTHER_USER
    (line,) = request_lines(capfd)[-2:-1]
    assert (line["status"], line["reason"]) == (401, "logged_out")


def test_a_logout_ends_its_own_login_only_even_one_made_in_the_same_second(make_app):
    app = make_app(clock=ManualClock())
    client = app.test_client()
    first, second = cookie_token(app), cookie_token(app)  # one user, two browsers, one second
    assert first != second
    assert logout(client, first).status_code == 204
    assert me(client, first).status_code == 401
    assert me(client, second).get_json() == USER


def test_a_cookie_token_with_only_the_spec_claims_is_logged_out_too(app, client, signing_key):
    token = make_token(signing_key, {"sub": {"id": "7"}, "exp": 2_000_000_000})
    assert me(client, token).status_code == 200
    assert logout(client, token).status_code == 204
    assert me(client, token).status_code == 401


def test_the_deny_entry_lasts_until_the_tokens_exp_and_the_clock_skew(make_app):
    clock = ManualClock()
    app = make_app(clock=clock)
    client, store = app.test_client(), app.extensions["token_store"]
    token = cookie_token(app, lifetime=600)
    exp = int(clock()) + 600  # issued in this second (the clock's is a whole one)
    assert logout(client, token).status_code == 204
    digests, skew = (logout_digest(token), token_digest(token)), app.config["SETTINGS"].clock_skew
    clock.advance(exp + skew - clock() - 0.5)
    assert [store.is_denied(digest) for digest in digests] == [True, True]
    clock.advance(0.5)  # the token has expired on every host: the entry with it
    assert [store.is_denied(digest) for digest in digests] == [False, False]


ES256_ONLY = pytest.mark.parametrize("signing_algorithm", ["ES256"], indirect=True)


def cookie_answers(app, token: str) -> tuple[int, int]:
    """Return the status of /api/v1/me and of /auth/check (AUTH_CHECK_COOKIE) for ``token``."""
    client = app.test_client()
    client.set_cookie("jwt", token)
    return client.get("/api/v1/me").status_code, client.get("/auth/check").status_code


@ES256_ONLY
def test_the_twin_of_a_cookie_token_is_401_everywhere_live_or_logged_out(make_app, signing_key):
    first, second = make_app(AUTH_CHECK_COOKIE="on"), make_app(AUTH_CHECK_COOKIE="on")
    token = cookie_token(first)
    twin = ecdsa_twin(token)  # what a thief of the cookie can write without the key
    assert twin != token
    assert jwt.PyJWS().decode(twin, signing_key.public, ["ES256"])  # PyJWT alone takes it
    assert cookie_answers(first, token) == (200, 200)
    assert cookie_answers(second, twin) == (401, 401)  # while the token is live
    assert logout(first.test_client(), token).status_code == 204
    for app in (first, second):  # two workers or hosts on one store
        assert cookie_answers(app, token) == (401, 401)
        assert cookie_answers(app, twin) == (401, 401)


@ES256_ONLY
def test_the_deny_list_alone_refuses_the_twin_of_a_logged_out_token(make_app, monkeypatch):
    monkeypatch.setattr(tokens, "is_low_s", lambda signature: True)  # a high S verifies
    app = make_app(AUTH_CHECK_COOKIE="on")
    token = cookie_token(app)
    twin = ecdsa_twin(token)
    assert cookie_answers(app, twin) == (200, 200)
    assert logout(app.test_client(), token).status_code == 204
    assert cookie_answers(app, twin) == (401, 401)


@ES256_ONLY
def test_a_logout_denies_the_signing_input_which_no_signature_changes(app, client):
    token = cookie_token(app)
    store = app.extensions["token_store"]
    assert logout(client, token).status_code == 204
    assert logout_digest(ecdsa_twin(token)) == logout_digest(token)
    assert store.is_denied(logout_digest(token)) is True
    # and the digests of the whole texts, which hosts of the release before look up
    assert store.is_denied(token_digest(token)) is True
    assert store.is_denied(token_digest(ecdsa_twin(token))) is True


@pytest.mark.parametrize(
    ("signing_algorithm", "denied_text"),
    [("HS256", "token"), ("ES256", "token"), ("ES256", "twin")],
    indirect=["signing_algorithm"],
)
def test_a_deny_entry_of_the_release_before_still_refuses_its_token(app, client, denied_text):
    token, other = cookie_token(app), cookie_token(app)
    # That release denied the whole text's digest, and signed either ES256 form: the
    # token it logged out may be the high-S twin of the one presented now.
    text = token if denied_text == "token" else ecdsa_twin(token)
    app.extensions["token_store"].deny(token_digest(text), time.time() + 600)
    assert me(client, token).status_code == 401
    assert me(client, other).status_code == 200


@pytest.mark.parametrize("cookie", [None, "not.a.token", "expired"])
def test_a_logout_without_a_valid_cookie_token_denies_nothing(app, client, cookie):
    if cookie == "expired":
        cookie = cookie_token(app, lifetime=-1)
    assert logout(client, cookie).status_code == 204
    store = app.extensions["token_store"]
    assert store.is_denied(token_digest(cookie or "")) is False
    assert store.is_denied(logout_digest(cookie or "")) is False


@pytest.mark.own_store
def test_a_store_down_is_503_on_me_and_logout_and_never_on_bearer_endpoints(make_app):
    app = make_app(TOKEN_STORE_URL=f"redis://127.0.0.1:{free_port()}/0")  # nothing listens
    client, token = app.test_client(), cookie_token(app)
    assert me(client, token).status_code == 503  # fail closed: no token passes unchecked
    assert logout(client, token).status_code == 503  # and the cookie is kept, to retry
    access_token = issue_access_token("alice", "user", app.extensions[KEY_RING], 60)
    assert client.get("/user-accessible", headers=bearer(access_token)).status_code == 200
    assert me(client, "not.a.token").status_code == 401  # refused before the store is asked


HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=60)


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    origin=st.one_of(st.none(), HEADER_TEXT, st.sampled_from(["http://localhost", EVIL])),
    site=st.one_of(st.none(), HEADER_TEXT, st.sampled_from(["same-origin", "cross-site"])),
)
@pytest.mark.store("sqlite")
def test_any_origin_and_fetch_site_get_204_only_from_here_else_403(client, origin, site):
    named = [("Origin", origin), ("Sec-Fetch-Site", site)]
    headers = {name: value for name, value in named if value is not None}
    response = client.post("/auth/logout", headers=headers)
    from_here = site == "same-origin" or (
        origin_of(origin) == "http://localhost" if origin is not None else site is None
    )
    assert response.status_code == (204 if from_here else 403)
