"""End to end against a real OpenID Connect provider (node oidc-provider) and gunicorn."""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import jwt
import pytest
import requests

from tests.helpers.oidc_harness import (
    expected_claims,
    node_unavailable_reason,
    start_provider,
    walk_login,
)
from tests.helpers.servers import Gunicorn, free_port, gunicorn_environment
from tests.helpers.tools import require_tool

# The third-party login touches no refresh-token store: one backend is enough.
pytestmark = [pytest.mark.oidc, pytest.mark.gunicorn, pytest.mark.store("sqlite")]

CLIENT_ID = "token-service"
CLIENT_SECRET = "oidc-client-secret-for-tests-only"
LIFETIME = 900
#: Where the provider puts the profile claims: at userinfo only (its defaults), or in the
#: ID token too. A test parametrized with ``deployment`` over these runs once with each.
PROFILE_PLACES = ["userinfo", "id_token"]


class Browser(requests.Session):
    """A cookie-keeping HTTP client whose every request gives up after 10 s."""

    def request(self, *args, **kwargs):
        kwargs.setdefault("timeout", 10)
        return super().request(*args, **kwargs)


@dataclass
class Deployment:
    app_url: str
    issuer: str
    signing_secret: str

    def url(self, path: str) -> str:
        return self.app_url + path


def require_provider() -> None:
    reason = node_unavailable_reason()
    require_tool(reason is None, "node and the oidc-provider package", str(reason))


@pytest.fixture(scope="module")
def deployment(request, tmp_path_factory) -> Iterator[Deployment]:
    """A provider that knows our callback, and gunicorn configured for that provider: one
    pair for the module's tests, each of which logs in with a browser of its own.

    The provider runs on its defaults (profile claims at userinfo only), unless
    the test is parametrized with ``"id_token"`` (one of PROFILE_PLACES).
    """
    require_provider()
    folder = tmp_path_factory.mktemp("oidc-deployment")
    signing_secret = secrets.token_urlsafe(48)
    # its port is bound, so known, already: the provider is told the callback first
    server = Gunicorn(gunicorn_environment(folder, None, None), 2, folder / "gunicorn.log")
    callback = f"{server.url}/auth/local/callback"
    provider = start_provider(
        free_port(),
        CLIENT_ID,
        CLIENT_SECRET,
        [callback],
        profile_in_id_token=getattr(request, "param", "userinfo") == "id_token",
    )
    try:
        server.env.update(
            {
                "SIGNING_SECRET": signing_secret,
                "OIDC_PROVIDERS": "local",
                "OIDC_LOCAL_ISSUER": provider.issuer,
                "OIDC_LOCAL_CLIENT_ID": CLIENT_ID,
                "OIDC_LOCAL_CLIENT_SECRET": CLIENT_SECRET,
                "AUTH_COOKIE_SECURE": "false",
                "COOKIE_TOKEN_LIFETIME": str(LIFETIME),
                "LOGIN_REDIRECT_URL": "/api/v1/me",
            }
        )
        server.start()
        yield Deployment(server.url, provider.issuer, signing_secret)
    finally:
        server.kill()
        provider.stop()


def start_login(browser: Browser, deployment: Deployment) -> str:
    """Hit our login route; return the provider authorization URL it redirects to."""
    response = browser.get(deployment.url("/auth/local/login"), allow_redirects=False)
    assert response.status_code == 302
    return response.headers["Location"]


def with_query(url: str, **changes: str) -> str:
    parts = urlsplit(url)
    query = {key: values[0] for key, values in parse_qs(parts.query).items()}
    query.update(changes)
    return urlunsplit(parts._replace(query=urlencode(query)))


def provider_callback(browser: Browser, authorize_url: str) -> str:
    """Walk the provider's login and consent pages; return our callback URL it sends back."""
    response = walk_login(browser, authorize_url, login="alice")
    return response.headers["Location"]


@pytest.mark.parametrize("profile_in", PROFILE_PLACES)
def test_provider_puts_the_profile_in_the_id_token_only_when_asked(profile_in):
    """The premise of the login test's two cases: where the real provider puts ``name``."""
    require_provider()
    callback = "http://127.0.0.1:9/callback"  # never visited: walk_login stops before it
    in_id_token = profile_in == "id_token"
    with (
        start_provider(
            free_port(), CLIENT_ID, CLIENT_SECRET, [callback], profile_in_id_token=in_id_token
        ) as provider,
        Browser() as browser,
    ):
        tokens = code_flow_tokens(browser, provider.issuer, callback)
        bearer = {"Authorization": f"Bearer {tokens['access_token']}"}
        userinfo = browser.get(f"{provider.issuer}/me", headers=bearer).json()
    id_token = jwt.decode(tokens["id_token"], options={"verify_signature": False})
    assert id_token["sub"] == userinfo["sub"] == "alice"
    assert userinfo["name"] == expected_claims("alice")["name"]
    assert ("name" in id_token) == in_id_token


def code_flow_tokens(browser: Browser, issuer: str, callback: str) -> dict:
    """Log alice in at the provider as a bare client would; return the token response."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    query = {
        "response_type": "code", "client_id": CLIENT_ID, "redirect_uri": callback,
        "scope": "openid profile email", "state": "s", "nonce": "n",
        "code_challenge": base64.urlsafe_b64encode(digest).rstrip(b"=").decode(),
        "code_challenge_method": "S256",
    }  # fmt: skip
    answer = walk_login(browser, f"{issuer}/auth?{urlencode(query)}")
    code = parse_qs(urlsplit(answer.headers["Location"]).query)["code"][0]
    grant = {
        "grant_type": "authorization_code", "code": code,
        "redirect_uri": callback, "code_verifier": verifier,
    }  # fmt: skip
    response = browser.post(f"{issuer}/token", data=grant, auth=(CLIENT_ID, CLIENT_SECRET))
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("deployment", PROFILE_PLACES, indirect=True)
def test_browser_login_sets_the_cookie_that_me_reads(deployment):
    browser = Browser()
    authorize_url = start_login(browser, deployment)
    query = parse_qs(urlsplit(authorize_url).query)
    assert authorize_url.startswith(deployment.issuer)
    assert query["response_type"] == ["code"]
    assert query["client_id"] == [CLIENT_ID]
    assert query["code_challenge_method"] == ["S256"]
    for parameter in ["code_challenge", "state", "nonce"]:
        assert query[parameter][0]
    assert "openid" in query["scope"][0].split()

    callback = provider_callback(browser, authorize_url)
    assert callback.startswith(deployment.url("/auth/local/callback?"))
    before = int(time.time())
    response = browser.get(callback, allow_redirects=False)
    assert response.status_code == 302, response.text
    assert response.headers["Location"] == "/api/v1/me"
    set_cookie = [
        value for value in response.raw.headers.getlist("Set-Cookie") if value.startswith("jwt=")
    ]
    assert len(set_cookie) == 1
    for attribute in ["HttpOnly", "SameSite=Lax", "Path=/", f"Max-Age={LIFETIME}"]:
        assert attribute in set_cookie[0]
    assert "Secure" not in set_cookie[0]  # AUTH_COOKIE_SECURE=false for plain-http testing

    cookie_token = browser.cookies.get("jwt")
    claims = jwt.decode(
        cookie_token,
        deployment.signing_secret,
        algorithms=["HS256"],
        options={"verify_sub": False},
    )
    assert claims["sub"] == {"source": "local", "id": "alice", "shownName": "Alice Example"}
    assert before + LIFETIME <= claims["exp"] <= int(time.time()) + LIFETIME

    response = browser.get(deployment.url("/api/v1/me"))
    assert response.status_code == 200
    assert response.json() == {"source": "local", "id": "alice", "shownName": "Alice Example"}


def test_replayed_callback_is_refused(deployment):
    browser = Browser()
    callback = provider_callback(browser, start_login(browser, deployment))
    assert browser.get(callback, allow_redirects=False).status_code == 302
    replay = browser.get(callback, allow_redirects=False)
    assert replay.status_code == 400
    assert replay.json()["message"].startswith("login failed")
    stranger = Browser()  # the callback URL alone, from another browser
    assert stranger.get(callback, allow_redirects=False).status_code == 400
    assert "jwt" not in stranger.cookies


def test_forged_state_is_refused(deployment):
    browser = Browser()
    callback = provider_callback(browser, start_login(browser, deployment))
    response = browser.get(with_query(callback, state="forged-state"), allow_redirects=False)
    assert response.status_code == 400
    assert response.json()["message"].startswith("login failed: mismatching_state")
    assert "jwt" not in browser.cookies


def test_wrong_nonce_is_refused(deployment):
    browser = Browser()
    authorize_url = with_query(start_login(browser, deployment), nonce="attacker-nonce")
    response = browser.get(provider_callback(browser, authorize_url), allow_redirects=False)
    assert response.status_code == 400
    assert "nonce" in response.json()["message"]
    assert "jwt" not in browser.cookies
    assert browser.get(deployment.url("/api/v1/me")).status_code == 401


def test_tampered_pkce_challenge_is_refused(deployment):
    browser = Browser()
    authorize_url = with_query(
        start_login(browser, deployment), code_challenge="A" * 43
    )  # the provider will want a verifier we do not have
    response = browser.get(provider_callback(browser, authorize_url), allow_redirects=False)
    assert response.status_code == 400
    assert "invalid_grant" in response.json()["message"]
    assert "jwt" not in browser.cookies


def test_logout_clears_the_cookie(deployment):
    browser = Browser()
    browser.get(provider_callback(browser, start_login(browser, deployment)), allow_redirects=False)
    assert browser.get(deployment.url("/api/v1/me")).status_code == 200
    response = browser.post(deployment.url("/auth/logout"))
    assert response.status_code == 204
    assert "jwt" not in browser.cookies
    assert browser.get(deployment.url("/api/v1/me")).status_code == 401


def test_cookie_is_not_an_access_token_over_the_wire(deployment):
    browser = Browser()
    browser.get(provider_callback(browser, start_login(browser, deployment)), allow_redirects=False)
    cookie_token = browser.cookies.get("jwt")
    assert browser.get(deployment.url("/user-accessible")).status_code == 401
    headers = {"Authorization": f"Bearer {cookie_token}"}
    assert (
        requests.get(deployment.url("/user-accessible"), headers=headers, timeout=10).status_code
        == 401
    )
