"""The login-state cookie: Flask's signed session, on the third-party login routes only.

State, nonce and PKCE verifier ride in it for the few seconds of the round trip to
the provider, so any worker or host can finish a login. Every other endpoint is
session-less.
"""

from __future__ import annotations

import hashlib
import hmac

from flask import Flask, Request
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface

from app.config.settings import Settings

#: Path prefix of the login routes; the login-state cookie is read under it only.
ROUTE_PREFIX = "/auth"
#: Cookie holding state, nonce and PKCE verifier during the round trip.
LOGIN_STATE_COOKIE = "login_state"


class LoginStateSessionInterface(SecureCookieSessionInterface):
    """Flask's signed-cookie session, opened on the third-party login routes only.

    Every other endpoint skips the cost of building a signing serializer for a
    cookie it would never read.
    """

    def open_session(self, app: Flask, request: Request) -> SecureCookieSession | None:
        # Flask opens the session before it routes the request: go by the path.
        if not request.path.startswith(f"{ROUTE_PREFIX}/"):
            return self.make_null_session(app)
        return super().open_session(app, request)


def init_login_state(app: Flask, settings: Settings) -> None:
    """Make Flask's session the login-state cookie: its key, name, attributes, and routes."""
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
