"""Third-party login: the OpenID Connect authorization-code flow, with PKCE, state and nonce.

``init_third_party_login`` sets the flow up only when a provider is configured: a
service without one never imports Authlib, requests and joserfc (slow to import, in
every process) and keeps no login-state cookie. The routes are
``app/views/oauth.py``; they reach the flow through ``get_login_flow()``.
"""

from __future__ import annotations

from flask import Flask

from app.config.settings import Settings
from app.extensions import LOGIN_FLOW
from app.oidc.login_state import init_login_state


def init_third_party_login(app: Flask, settings: Settings) -> None:
    """Set up the login-state cookie and the flow of the configured providers.

    With no provider, do nothing at all: Flask's session stays as Flask made it.
    """
    if not settings.identity_providers:
        return
    init_login_state(app, settings)
    # imported here, not at the top: Authlib, requests and joserfc only with a provider
    from app.oidc.flow import LoginFlow

    app.extensions[LOGIN_FLOW] = LoginFlow(settings)
