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
from flask import Blueprint, Flask, Request, Response, current_app, request, session, url_for
from flask.sessions import SecureCookieSessionInterface, SessionMixin
from joserfc.errors import JoseError
from werkzeug.exceptions import BadGateway, BadRequest, NotFound

from app.config import IdentityProvider, Settings, current_settings
from app.tokens import issue_cookie_token
from app.views import bodiless

bp = Blueprint("oauth", __name__, url_prefix="/auth")

#: How long the provider may take to answer one request, in seconds.
PROVIDER_TIMEOUT = 10
#: Cookie holding state, nonce and PKCE verifier during the round trip.
LOGIN_STATE_COOKIE = "login_state"
#: Logins started and not finished that the cookie remembers; older ones are dropped, so
#: the cookie never outgrows a browser's 4 KB (each pending login costs ~180 bytes).
MAX_PENDING_LOGINS = 3
#: ID token signatures accepted: asymmetric only. Never "none", nor an HMAC keyed with
#: the client secret, whatever the provider's discovery document offers.
ID_TOKEN_ALGORITHMS = (
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA",
)  # fmt: skip
#: Fields a discovery document must have for the code flow to work at all.
REQUIRED_METADATA = ("issuer", "authorization_endpoint", "token_endpoint", "jwks_uri")
#: Clock skew allowed between the provider and the service on the ID token's times.
ID_TOKEN_LEEWAY = 60
#: Longest provider user id and display name taken into the cookie token.
MAX_USER_FIELD_LENGTH = 256


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
    secret = settings.signing_secret
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
    client, _ = _client(provider)
    _forget_old_pending_logins()
    try:
        response = client.authorize_redirect(_callback_url(provider))
    except requests.RequestException as error:
        raise _provider_unreachable(provider, error) from None
    return bodiless(302, Location=response.headers["Location"])


@bp.get("/<provider>/callback")
def callback(provider: str) -> Response:
    """Check the provider's answer and ID token, set the cookie token, redirect onwards."""
    client, metadata = _client(provider)
    try:
        token = client.authorize_access_token(
            claims_options={
                "iss": {"essential": True, "value": metadata["issuer"]},
                "aud": {"essential": True, "value": client.client_id},
            },
            leeway=ID_TOKEN_LEEWAY,
        )
    except requests.RequestException as error:
        raise _provider_unreachable(provider, error) from None
    except (AuthlibBaseError, JoseError, ValueError, KeyError, TypeError) as error:
        session.pop(f"_state_{provider}_{request.args.get('state')}", None)
        current_app.logger.warning(
            "third-party login refused: provider=%s error=%r", provider, error
        )
        raise BadRequest(f"login failed: {_reason(error)}") from None
    user = _user(provider, token.get("userinfo"))
    settings = current_settings()
    cookie_token = issue_cookie_token(user, settings.signing_secret, settings.cookie_token_lifetime)
    current_app.logger.info("third-party login: provider=%s id=%r", provider, user["id"])
    response = bodiless(302, Location=settings.login_redirect_url)
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
    settings = current_settings()
    response = bodiless(204)
    response.delete_cookie(
        settings.auth_cookie_name,
        path="/",
        secure=settings.auth_cookie_secure,
        httponly=True,
        samesite="Lax",
    )
    return response


def _client(provider: str) -> tuple[Any, dict[str, Any]]:
    """Return the Authlib client of a configured provider and its checked metadata."""
    settings: Settings = current_settings()
    configured: IdentityProvider | None = settings.identity_provider(provider)
    if configured is None:
        raise NotFound("unknown identity provider")
    client = current_app.extensions["authlib.integrations.flask_client"].create_client(provider)
    try:
        metadata = client.load_server_metadata()
    except requests.RequestException as error:
        raise _provider_unreachable(provider, error) from None
    except (ValueError, TypeError) as error:  # not JSON, or not an object
        client.server_metadata.clear()
        raise _provider_unreachable(provider, error) from None
    missing = [name for name in REQUIRED_METADATA if not isinstance(metadata.get(name), str)]
    if missing or metadata["issuer"].rstrip("/") != configured.issuer:
        client.server_metadata.clear()  # not cached: the next login fetches it again
        current_app.logger.warning(
            "identity provider %s: discovery document unusable (missing %s, issuer %r)",
            provider,
            missing,
            metadata.get("issuer"),
        )
        raise BadGateway("identity provider sent an unusable discovery document")
    offered = metadata.get("id_token_signing_alg_values_supported")
    offered = offered if isinstance(offered, list) else ["RS256"]
    # Authlib verifies with the algorithms listed here: keep only the asymmetric ones.
    metadata["id_token_signing_alg_values_supported"] = [
        algorithm for algorithm in offered if algorithm in ID_TOKEN_ALGORITHMS
    ] or ["RS256"]
    return client, metadata


def _forget_old_pending_logins() -> None:
    pending = sorted(
        (key for key in session if key.startswith("_state_")),
        key=lambda key: session[key].get("exp", 0) if isinstance(session[key], dict) else 0,
    )
    for key in pending[: max(0, len(pending) - (MAX_PENDING_LOGINS - 1))]:
        session.pop(key)


def _user(provider: str, claims: dict[str, Any] | None) -> dict[str, str]:
    """Return the cookie token's user from the verified ID token claims, or 400."""
    subject = claims.get("sub") if claims else None
    if not isinstance(subject, str) or not 0 < len(subject) <= MAX_USER_FIELD_LENGTH:
        raise BadRequest("login failed: the provider sent no usable ID token subject")
    return {
        "source": provider,
        "id": subject,
        "shownName": _shown_name(claims)[:MAX_USER_FIELD_LENGTH],
    }


def _callback_url(provider: str) -> str:
    public_url = current_settings().public_url
    if public_url:
        return public_url + url_for("oauth.callback", provider=provider)
    return url_for("oauth.callback", provider=provider, _external=True)


def _shown_name(claims: Any) -> str:
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
