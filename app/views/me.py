"""``/api/v1``: the user of a third-party login, identified by the signed cookie."""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from app.http.guards import authenticated_cookie_user

bp = Blueprint("me", __name__, url_prefix="/api/v1")


@bp.get("/me")
def me() -> dict[str, Any]:
    """Return the logged user ``{source, id, shownName}`` named by the cookie token, or 401."""
    return authenticated_cookie_user()
