"""The service's blueprints."""

from __future__ import annotations

from flask import Flask

from app.views import auth, console, gateway, jwks, me, oauth, ops, resources, sessions


def register_blueprints(app: Flask) -> None:
    """Mount every blueprint on ``app``."""
    app.register_blueprint(auth.bp)
    app.register_blueprint(resources.bp)
    app.register_blueprint(gateway.bp)
    app.register_blueprint(me.bp)
    app.register_blueprint(oauth.bp)
    app.register_blueprint(ops.bp)
    app.register_blueprint(jwks.bp)
    app.register_blueprint(sessions.bp)
    app.register_blueprint(console.bp)
