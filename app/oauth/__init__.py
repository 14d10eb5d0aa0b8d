"""The OAuth 2 authorization server around SPEC.md's endpoints (docs/oauth.md): registered
clients, client authentication, errors by RFC 6749, server metadata (RFC 8414) and
introspection (RFC 7662). The endpoints are ``app.views.oauth_server`` and
``app.views.server_metadata``; ``app.views.oauth`` is the third-party login, another thing."""

from __future__ import annotations

from flask import Flask

from app.config.settings import Settings
from app.extensions import CLIENT_REGISTRY, clock_of
from app.oauth.clients import ClientRegistry


def init_oauth(app: Flask, settings: Settings) -> None:
    """Attach the registered clients of CLIENTS_FILE to ``app``, or None when it is unset."""
    registry = None
    if settings.clients_file is not None:
        registry = ClientRegistry(settings.clients_file, clock=clock_of(app))
    app.extensions[CLIENT_REGISTRY] = registry
