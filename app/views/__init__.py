"""The service's blueprints."""

from __future__ import annotations

from flask import Flask

from app.config.settings import Settings
from app.views import (
    auth,
    console,
    gateway,
    jwks,
    me,
    oauth,
    oauth_server,
    ops,
    resources,
    server_metadata,
    sessions,
)


def register_blueprints(app: Flask) -> None:
    """Mount every blueprint on ``app``; the OAuth server's only with its settings, so that
    without them every answer stays what it was (a 404 for their paths)."""
    settings: Settings = app.config["SETTINGS"]
    app.register_blueprint(auth.bp)
    app.register_blueprint(resources.bp)
    app.register_blueprint(gateway.bp)
    app.register_blueprint(me.bp)
    app.register_blueprint(oauth.bp)
    app.register_blueprint(ops.bp)
    app.register_blueprint(jwks.bp)
    app.register_blueprint(sessions.bp)
    app.register_blueprint(console.bp)
    if settings.token_issuer is not None:
        app.register_blueprint(server_metadata.bp)
    if settings.clients_file is not None:
        app.register_blueprint(oauth_server.bp)
