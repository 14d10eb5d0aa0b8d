"""Third-party login: the OpenID Connect authorization-code flow, with PKCE, state and nonce.

``init_third_party_login`` sets the flow up only when a provider is configured: a
service without one never imports Authlib, requests and joserfc (slow to import, in
every process) and keeps no login-state cookie. The routes are
``app/views/oauth.py``; they reach the flow through ``login_flow()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flask import Flask, current_app

from app.config.settings import Settings
from app.oidc.login_state import ROUTE_PREFIX, init_login_state

if TYPE_CHECKING:
    from app.oidc.flow import LoginFlow

__all__ = ["ROUTE_PREFIX", "init_third_party_login", "login_flow"]

EXTENSION = "third_party_login"


def init_third_party_login(app: Flask, settings: Settings) -> None:
    """Set up the login-state cookie and the flow of the configured providers.

    With no provider, do nothing at all: Flask's session stays as Flask made it.
    """
    if not settings.identity_providers:
        return
    init_login_state(app, settings)
    # imported here, not at the top: Authlib, requests and joserfc only with a provider
    from app.oidc.flow import LoginFlow

    app.extensions[EXTENSION] = LoginFlow(settings)


def login_flow() -> LoginFlow | None:
    """Return the current app's login flow, or None when no provider is configured."""
    return current_app.extensions.get(EXTENSION)
