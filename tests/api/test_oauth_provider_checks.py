"""What the login checks in a provider's answers: a hostile provider must not log anyone in."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
import requests
from flask.testing import FlaskClient

from app.oidc import provider as login_provider
from app.oidc.flow import MAX_USER_FIELD_LENGTH
from tests.helpers.hostile_provider import CLIENT_ID, CLIENT_SECRET, HostileProvider


@pytest.fixture
def provider() -> Iterator[HostileProvider]:
    provider = HostileProvider()
    yield provider
    provider.stop()


@pytest.fixture
def browser(make_app, provider) -> FlaskClient:
    return make_app(
        OIDC_PROVIDERS="evil",
        OIDC_EVIL_ISSUER=provider.issuer,
        OIDC_EVIL_CLIENT_ID=CLIENT_ID,
        OIDC_EVIL_CLIENT_SECRET=CLIENT_SECRET,
        AUTH_COOKIE_SECURE="false",
    ).test_client()


def start_login(browser: FlaskClient):
    return browser.get("/auth/evil/login")


def finish_login(browser: FlaskClient, login_response):
    """Let the provider answer the authorization request, then call our callback."""
    answer = requests.get(login_response.headers["Location"], allow_redirects=False, timeout=5)
    callback = urlsplit(answer.headers["Location"])
    return browser.get(f"{callback.path}?{callback.query}")


def log_in(browser: FlaskClient):
    return finish_login(browser, start_login(browser))


def assert_refused(browser: FlaskClient, response, status: int = 400) -> None:
    assert response.status_code == status, response.data
    assert response.mimetype == "application/json"
    assert browser.get_cookie("jwt") is None
    assert browser.get("/api/v1/me").status_code == 401


def test_a_correct_provider_logs_in_with_bodiless_redirects(browser):
    started = start_login(browser)
    assert (started.status_code, started.data) == (302, b"")
    assert "Content-Type" not in started.headers
    response = finish_login(browser, started)
    assert (response.status_code, response.data) == (302, b"")
    assert "Content-Type" not in response.headers
    assert response.headers["Location"] == "/api/v1/me"
    assert browser.get("/api/v1/me").get_json() == {
        "source": "evil",
        "id": "alice",
        "shownName": "Alice Example",
    }


@pytest.mark.parametrize(
    "claims",
    [
        {"aud": "someone-else", "azp": CLIENT_ID},
        {"aud": ["someone-else", "third"], "azp": CLIENT_ID},
        {"aud": None},
        {"iss": "http://evil.example"},
        {"iss": None},
        {"sub": ""},
        {"sub": None},
        {"sub": 12345},
        {"sub": "x" * (MAX_USER_FIELD_LENGTH + 1)},
        {"nonce": "not-the-one-we-sent"},
        {"nonce": None},
        {"exp": 1_000_000_000},
    ],
    ids=repr,
)
def test_id_token_with_a_bad_claim_is_refused(browser, provider, claims):
    provider.claim_changes = claims
    assert_refused(browser, log_in(browser))


@pytest.mark.parametrize("signing", ["none", "HS256"])
def test_unsigned_or_client_secret_signed_id_token_is_refused_even_if_advertised(
    browser, provider, signing
):
    provider.discovery_changes = {"id_token_signing_alg_values_supported": [signing, "RS256"]}
    provider.signing = signing
    assert_refused(browser, log_in(browser))


@pytest.mark.parametrize(
    "changes",
    [{"issuer": "http://127.0.0.1:1"}, {"issuer": None}, {"jwks_uri": None}, {"token_endpoint": 5}],
    ids=repr,
)
def test_unusable_discovery_is_502_and_not_cached(browser, provider, changes):
    provider.discovery_changes = changes
    response = start_login(browser)
    assert response.status_code == 502
    assert response.get_json() == {
        "message": "identity provider sent an unusable discovery document"
    }
    provider.discovery_changes = {}  # the provider is fixed: the next login works
    assert log_in(browser).status_code == 302


@pytest.mark.parametrize("body", [b"<html>oops</html>", b"[]", b"{}"])
def test_discovery_that_is_not_a_document_is_502(browser, provider, body):
    provider.discovery_body = body
    assert start_login(browser).status_code == 502


def test_long_display_name_is_cut_to_fit_the_cookie(browser, provider):
    provider.claim_changes = {"name": "N" * 6000}
    response = log_in(browser)
    assert response.status_code == 302
    assert len(response.headers["Set-Cookie"]) < 4096
    assert browser.get("/api/v1/me").get_json()["shownName"] == "N" * MAX_USER_FIELD_LENGTH


def test_many_unfinished_logins_keep_the_state_cookie_small(browser):
    for _ in range(25):
        response = start_login(browser)
        assert len(response.headers["Set-Cookie"]) < 1500
    assert finish_login(browser, start_login(browser)).status_code == 302  # the newest works


def test_callback_without_login_state_is_400(browser):
    response = browser.get("/auth/evil/callback?code=abc&state=forged")
    assert_refused(browser, response)
    assert response.get_json()["message"].startswith("login failed: mismatching_state")


def test_callback_with_provider_error_is_400_and_forgets_that_login(browser):
    started = start_login(browser)
    state = dict(
        pair.split("=") for pair in urlsplit(started.headers["Location"]).query.split("&")
    )["state"]
    response = browser.get(f"/auth/evil/callback?error=access_denied&state={state}")
    assert_refused(browser, response)
    assert response.get_json() == {"message": "login failed: access_denied"}
    replay = browser.get(f"/auth/evil/callback?code=x&state={state}")
    assert replay.get_json()["message"].startswith("login failed: mismatching_state")


def test_discovery_fields_cannot_reconfigure_the_client(browser, provider):
    # Authlib passes discovery fields to its HTTP session; only the ones used are kept
    provider.discovery_changes = {
        "code_challenge_method": "plain",
        "client_id": "someone-else",
        "token_endpoint_auth_method": "none",
        "default_timeout": 0.000001,
        "verify": False,
        "proxies": {"http": "http://127.0.0.1:9"},
        "prompt": "none",
        "response_mode": "fragment",
    }
    started = start_login(browser)
    assert started.status_code == 302, started.data
    query = parse_qs(urlsplit(started.headers["Location"]).query)
    assert query["code_challenge_method"] == ["S256"]
    assert query["client_id"] == [CLIENT_ID]
    assert "prompt" not in query
    assert "response_mode" not in query
    assert finish_login(browser, started).status_code == 302
    assert browser.get("/api/v1/me").status_code == 200


# --- the profile: from the ID token, else from userinfo about the same subject ----------


def test_profile_in_the_id_token_is_used_without_calling_userinfo(browser, provider):
    provider.claim_changes = {"email": "alice@example.com", "email_verified": True}
    provider.userinfo_changes = {"name": "Someone Else"}
    assert log_in(browser).status_code == 302
    assert browser.get("/api/v1/me").get_json()["shownName"] == "Alice Example"
    assert provider.userinfo_requests == []


def test_profile_missing_from_the_id_token_comes_from_userinfo(browser, provider):
    provider.claim_changes = {"name": None}
    provider.userinfo_changes = {"name": "Alice From Userinfo"}
    assert log_in(browser).status_code == 302
    assert browser.get("/api/v1/me").get_json() == {
        "source": "evil",
        "id": "alice",
        "shownName": "Alice From Userinfo",
    }
    (authorization,) = provider.userinfo_requests
    assert authorization.removeprefix("Bearer ") in provider.access_tokens


@pytest.mark.parametrize("source", ["id_token", "userinfo"])
def test_preferred_username_is_shown_when_there_is_no_name(browser, provider, source):
    provider.claim_changes = {"name": None}
    provider.userinfo_changes = {"name": None}
    if source == "id_token":
        provider.claim_changes["preferred_username"] = "alice.e"
    else:
        provider.userinfo_changes["preferred_username"] = "alice.e"
    assert log_in(browser).status_code == 302
    assert browser.get("/api/v1/me").get_json()["shownName"] == "alice.e"


def test_account_without_name_or_preferred_username_has_no_shown_name(
    browser, provider, signing_secret
):
    # nickname, email or the subject are no display name: nothing is made up
    provider.claim_changes = {"name": None, "nickname": "ally", "email": "alice@example.com"}
    provider.userinfo_changes = {"name": "", "preferred_username": None, "nickname": "ally"}
    assert log_in(browser).status_code == 302
    claims = jwt.decode(
        browser.get_cookie("jwt").value,
        signing_secret,
        algorithms=["HS256"],
        options={"verify_sub": False},
    )
    assert claims["sub"] == {"source": "evil", "id": "alice"}
    assert browser.get("/api/v1/me").get_json() == {"source": "evil", "id": "alice"}


@pytest.mark.parametrize(
    "changes", [{"sub": "mallory"}, {"sub": None}, {"sub": ""}, {"sub": ["alice"]}], ids=repr
)
def test_userinfo_about_another_subject_is_refused(browser, provider, changes):
    provider.claim_changes = {"name": None}
    provider.userinfo_changes = changes
    response = log_in(browser)
    assert_refused(browser, response)
    assert response.get_json() == {
        "message": "login failed: userinfo is about another subject than the ID token"
    }


@pytest.mark.parametrize("access_token", [None, "", 42], ids=repr)
def test_no_usable_access_token_for_the_userinfo_request_is_refused(
    browser, provider, access_token
):
    provider.claim_changes = {"name": None}
    provider.token_changes = {"access_token": access_token}
    response = log_in(browser)
    assert_refused(browser, response)
    assert response.get_json() == {"message": "login failed: the provider sent no access token"}
    assert provider.userinfo_requests == []


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (500, b'{"error": "server_error"}'),
        (401, b'{"error": "invalid_token"}'),
        (302, b""),
        (200, b"<html>oops</html>"),
        (200, b""),
        (200, b'[{"sub": "alice", "name": "Alice"}]'),
        (200, b'"alice"'),
        (200, b"null"),
    ],
    ids=repr,
)
def test_broken_userinfo_answer_is_502_without_a_cookie(browser, provider, status, body):
    provider.claim_changes = {"name": None}
    provider.userinfo_status, provider.userinfo_body = status, body
    response = log_in(browser)
    assert_refused(browser, response, 502)
    assert response.get_json() == {
        "message": "identity provider sent an unusable userinfo response"
    }


def test_userinfo_that_does_not_answer_in_time_is_502_without_a_cookie(
    browser, provider, monkeypatch
):
    monkeypatch.setattr(login_provider, "PROVIDER_TIMEOUT", 0.2)
    provider.claim_changes = {"name": None}
    provider.userinfo_delay = 30  # far past the timeout: the service must not wait for it
    response = log_in(browser)
    assert len(provider.userinfo_requests) == 1
    assert not provider.userinfo_answered.is_set()  # the service answered first
    assert_refused(browser, response, 502)
    assert response.get_json() == {"message": "identity provider did not answer"}


def test_userinfo_needed_but_not_in_discovery_is_502_without_a_cookie(browser, provider):
    provider.claim_changes = {"name": None}
    provider.discovery_changes = {"userinfo_endpoint": None}
    response = log_in(browser)
    assert_refused(browser, response, 502)
    assert response.get_json() == {"message": "identity provider has no userinfo endpoint"}


def test_userinfo_not_needed_may_be_missing_from_discovery(browser, provider):
    provider.discovery_changes = {"userinfo_endpoint": None}
    assert log_in(browser).status_code == 302
    assert browser.get("/api/v1/me").get_json()["shownName"] == "Alice Example"
