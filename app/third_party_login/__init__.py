"""Third-party login: the OpenID Connect authorization-code flow, with PKCE, state and nonce.

``init_app`` sets the flow up only when a provider is configured: a service
without one never imports Authlib, requests and joserfc (about 100 ms in every
process) and keeps no login-state cookie. The routes are ``app/views/oauth.py``;
they reach the flow through ``login_flow()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flask import Flask, current_app

from app.config import Settings

if TYPE_CHECKING:
    from app.third_party_login.flow import LoginFlow

#: Path prefix of the login routes; the login-state cookie is read under it only.
ROUTE_PREFIX = "/auth"
EXTENSION = "third_party_login"


def init_app(app: Flask, settings: Settings) -> None:
    """Set up the login flow of the configured providers; with none, do nothing at all."""
    if not settings.identity_providers:
        return
    from app.third_party_login.flow import LoginFlow  # Authlib, requests, joserfc

    app.extensions[EXTENSION] = LoginFlow(app, settings)


def login_flow() -> LoginFlow | None:
    """Return the current app's login flow, or None when no provider is configured."""
    return current_app.extensions.get(EXTENSION)
