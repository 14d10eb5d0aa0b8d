"""Third-party login: OpenID Connect authorization code flow with PKCE, state and nonce.

``GET /auth/<provider>/login`` sends the browser to the provider;
``GET /auth/<provider>/callback`` checks the answer and the ID token, then sets
the cookie token that ``GET /api/v1/me`` reads; ``POST /auth/logout`` clears it.
State, nonce and PKCE verifier ride in Flask's signed session cookie for the
few seconds of the round trip, so any worker or host can finish a login.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import requests
from authlib.common.errors import AuthlibBaseError
from authlib.integrations.flask_client import OAuth
from flask import Blueprint, Flask, Request, Response, current_app, redirect, url_for
from flask.sessions import SecureCookieSessionInterface, SessionMixin
from joserfc.errors import JoseError
from werkzeug.exceptions import BadGateway, BadRequest, NotFound

from app.config import IdentityProvider, Settings
from app.tokens import issue_cookie_token

bp = Blueprint("oauth", __name__, url_prefix="/auth")

#: How long the provider may take to answer one request, in seconds.
PROVIDER_TIMEOUT = 10
#: Cookie holding state, nonce and PKCE verifier during the round trip.
LOGIN_STATE_COOKIE = "login_state"


class LoginStateSessionInterface(SecureCookieSessionInterface):
    """Flask's signed-cookie session, opened on the third-party login routes only.

    Every other endpoint is session-less, and skips the cost of building a
    signing serializer for a cookie it would never read.
    """

    def open_session(self, app: Flask, request: Request) -> SessionMixin | None:
        # Flask opens the session before it routes the request: go by the path.
        if not request.path.startswith(f"{bp.url_prefix}/"):
            return self.make_null_session(app)
        return super().open_session(app, request)


def init_third_party_login(app: Flask, settings: Settings) -> None:
    """Register every configured OpenID Connect provider with Authlib."""
    secret = settings.signing_secret or ""
    app.config.update(
        # a key of its own, derived so that it never equals the token key
        SECRET_KEY=hmac.new(secret.encode(), b"login-state", hashlib.sha256).hexdigest(),
        SESSION_COOKIE_NAME=LOGIN_STATE_COOKIE,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=settings.auth_cookie_secure,
    )
    app.session_interface = LoginStateSessionInterface()
    oauth = OAuth(app)
    for provider in settings.identity_providers:
        oauth.register(
            provider.name,
            client_id=provider.client_id,
            client_secret=provider.client_secret,
            server_metadata_url=provider.discovery_url,
            client_kwargs={
                "scope": provider.scopes,
                "code_challenge_method": "S256",
                "default_timeout": PROVIDER_TIMEOUT,
            },
        )


@bp.get("/<provider>/login")
def login(provider: str) -> Response:
    """Send the browser to the provider's authorization endpoint."""
    client = _client(provider)
    try:
        return client.authorize_redirect(_callback_url(provider))
    except requests.RequestException as error:
        raise _provider_unreachable(provider, error) from None


@bp.get("/<provider>/callback")
def callback(provider: str) -> Response:
    """Check the provider's answer and ID token, set the cookie token, redirect onwards."""
    client = _client(provider)
    try:
        token = client.authorize_access_token()
    except requests.RequestException as error:
        raise _provider_unreachable(provider, error) from None
    except (AuthlibBaseError, JoseError, ValueError, KeyError) as error:
        current_app.logger.warning(
            "third-party login refused: provider=%s error=%r", provider, error
        )
        raise BadRequest(f"login failed: {_reason(error)}") from None
    claims = token.get("userinfo")
    if not claims or not isinstance(claims.get("sub"), str):
        raise BadRequest("login failed: the provider sent no valid ID token")
    user = {"source": provider, "id": claims["sub"], "shownName": _shown_name(claims)}
    settings = current_app.config["SETTINGS"]
    cookie_token = issue_cookie_token(user, settings.signing_secret, settings.cookie_token_lifetime)
    current_app.logger.info("third-party login: provider=%s id=%r", provider, user["id"])
    response = redirect(settings.login_redirect_url)
    response.set_cookie(
        settings.auth_cookie_name,
        cookie_token,
        max_age=settings.cookie_token_lifetime,
        path="/",
        secure=settings.auth_cookie_secure,
        httponly=True,
        samesite="Lax",
    )
    return response


@bp.post("/logout")
def logout() -> Response:
    """Clear the cookie token; 204 whether or not one was set."""
    settings = current_app.config["SETTINGS"]
    response = Response(status=204)
    del response.headers["Content-Type"]
    response.delete_cookie(
        settings.auth_cookie_name,
        path="/",
        secure=settings.auth_cookie_secure,
        httponly=True,
        samesite="Lax",
    )
    return response


def _client(provider: str) -> Any:
    settings: Settings = current_app.config["SETTINGS"]
    configured: IdentityProvider | None = settings.identity_provider(provider)
    if configured is None:
        raise NotFound("unknown identity provider")
    return current_app.extensions["authlib.integrations.flask_client"].create_client(provider)


def _callback_url(provider: str) -> str:
    public_url = current_app.config["SETTINGS"].public_url
    if public_url:
        return public_url + url_for("oauth.callback", provider=provider)
    return url_for("oauth.callback", provider=provider, _external=True)


def _shown_name(claims: dict[str, Any]) -> str:
    for claim in ("name", "preferred_username", "nickname", "email"):
        value = claims.get(claim)
        if isinstance(value, str) and value:
            return value
    return claims["sub"]


def _reason(error: Exception) -> str:
    text = getattr(error, "error", None) or type(error).__name__
    description = getattr(error, "description", None)
    return f"{text}: {description}" if description else str(text)


def _provider_unreachable(provider: str, error: Exception) -> BadGateway:
    current_app.logger.warning("identity provider %s unreachable: %r", provider, error)
    return BadGateway("identity provider did not answer")
