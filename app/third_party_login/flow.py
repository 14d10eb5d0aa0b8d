"""The two legs of a login: to the provider, and back with a code for the user it names.

State, nonce and PKCE verifier ride in Flask's signed session cookie (the
login-state cookie) for the few seconds of the round trip, so any worker or
host can finish a login.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import requests
from authlib.common.errors import AuthlibBaseError
from flask import Flask, Request, current_app, request, session
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface
from joserfc.errors import JoseError
from werkzeug.exceptions import BadRequest

from app.config import Settings
from app.third_party_login import ROUTE_PREFIX
from app.third_party_login.provider import ProviderClient, provider_unreachable

#: Cookie holding state, nonce and PKCE verifier during the round trip.
LOGIN_STATE_COOKIE = "login_state"
#: Logins started and not finished that the cookie remembers; older ones are dropped, so
#: the cookie never outgrows a browser's 4 KB (each pending login costs ~180 bytes).
MAX_PENDING_LOGINS = 3
#: Clock skew allowed between the provider and the service on the ID token's times.
ID_TOKEN_LEEWAY = 60
#: Longest provider user id and display name taken into the cookie token.
MAX_USER_FIELD_LENGTH = 256
#: Claims that name the user, best first (OpenID Connect Core 5.1). No other claim is
#: shown in their place: an email address or the subject is not a display name.
SHOWN_NAME_CLAIMS = ("name", "preferred_username")


class LoginStateSessionInterface(SecureCookieSessionInterface):
    """Flask's signed-cookie session, opened on the third-party login routes only.

    Every other endpoint is session-less, and skips the cost of building a
    signing serializer for a cookie it would never read.
    """

    def open_session(self, app: Flask, request: Request) -> SecureCookieSession | None:
        # Flask opens the session before it routes the request: go by the path.
        if not request.path.startswith(f"{ROUTE_PREFIX}/"):
            return self.make_null_session(app)
        return super().open_session(app, request)


class LoginFlow:
    """The configured providers' clients, and the login on them."""

    def __init__(self, app: Flask, settings: Settings) -> None:
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
        self.clients = {
            provider.name: ProviderClient(provider) for provider in settings.identity_providers
        }

    def authorization_url(self, provider: str, callback_url: str) -> str:
        """Remember a new login in the login-state cookie; return the provider URL to visit."""
        client = self.clients[provider]
        login = client.create_authorization_url(callback_url)  # 502 if discovery fails
        _forget_old_pending_logins()
        client.save_authorize_data(redirect_uri=callback_url, **login)
        return str(login["url"])

    def logged_in_user(self, provider: str) -> dict[str, str]:
        """Check the provider's answer on this request; return the user it logs in, or raise.

        The user is ``{source, id, shownName}``, ``shownName`` left out when the
        provider knows no name for them.
        """
        client = self.clients[provider]
        issuer = client.load_server_metadata()["issuer"]
        try:
            token = client.authorize_access_token(
                claims_options={
                    "iss": {"essential": True, "value": issuer},
                    "aud": {"essential": True, "value": client.client_id},
                },
                leeway=ID_TOKEN_LEEWAY,
            )
        except requests.RequestException as error:
            raise provider_unreachable(provider, error) from None
        except (AuthlibBaseError, JoseError, ValueError, KeyError, TypeError) as error:
            session.pop(f"_state_{provider}_{request.args.get('state')}", None)
            raise _login_failed(provider, _reason(error), error) from None
        id_claims = token.get("userinfo") or {}
        subject = id_claims.get("sub")
        if not isinstance(subject, str) or not 0 < len(subject) <= MAX_USER_FIELD_LENGTH:
            raise _login_failed(provider, "the provider sent no usable ID token subject")
        shown_name = _shown_name(id_claims)
        if shown_name is None:  # the profile is at the userinfo endpoint (OIDC Core 5.4)
            shown_name = _shown_name(_userinfo_of(client, subject, token))
        user = {"source": provider, "id": subject}
        if shown_name is not None:
            user["shownName"] = shown_name[:MAX_USER_FIELD_LENGTH]
        current_app.logger.info("third-party login: provider=%s id=%r", provider, subject)
        return user


def _userinfo_of(client: ProviderClient, subject: str, token: dict[str, Any]) -> dict[str, Any]:
    """Return the userinfo claims of the login's access token, if about ``subject``; else 400."""
    access_token = token.get("access_token")
    if not isinstance(access_token, str) or not access_token:
        raise _login_failed(client.name, "the provider sent no access token")
    claims = client.userinfo_claims(access_token)
    # OIDC Core 5.3.2: the userinfo sub must be the ID token's, or the answer is not used.
    if claims.get("sub") != subject:
        raise _login_failed(client.name, "userinfo is about another subject than the ID token")
    return claims


def _shown_name(claims: dict[str, Any]) -> str | None:
    for claim in SHOWN_NAME_CLAIMS:
        value = claims.get(claim)
        if isinstance(value, str) and value:
            return value
    return None


def _forget_old_pending_logins() -> None:
    pending = sorted(
        (key for key in session if key.startswith("_state_")),
        key=lambda key: session[key].get("exp", 0) if isinstance(session[key], dict) else 0,
    )
    for key in pending[: max(0, len(pending) - (MAX_PENDING_LOGINS - 1))]:
        session.pop(key)


def _login_failed(provider: str, reason: str, error: Exception | None = None) -> BadRequest:
    current_app.logger.warning(
        "third-party login refused: provider=%s reason=%s error=%r", provider, reason, error
    )
    return BadRequest(f"login failed: {reason}")


def _reason(error: Exception) -> str:
    text = getattr(error, "error", None) or type(error).__name__
    description = getattr(error, "description", None)
    return f"{text}: {description}" if description else str(text)
