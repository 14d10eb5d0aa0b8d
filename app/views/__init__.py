"""The service's blueprints."""

from __future__ import annotations

from flask import Flask, Response


def register_blueprints(app: Flask) -> None:
    """Mount every blueprint on ``app``."""
    from app.views import auth, me, oauth, ops, resources

    app.register_blueprint(auth.bp)
    app.register_blueprint(resources.bp)
    app.register_blueprint(me.bp)
    app.register_blueprint(oauth.bp)
    app.register_blueprint(ops.bp)


def bodiless(status: int, **headers: str) -> Response:
    """Return a response with no body, hence no Content-Type (204, or a bare redirect)."""
    response = Response(status=status, headers=headers)
    del response.headers["Content-Type"]
    return response
