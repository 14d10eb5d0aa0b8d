"""``/api/v1``: the user of a third-party login, identified by the signed cookie."""

from __future__ import annotations

from flask import Blueprint, Response

from app.http.guards import authenticated_cookie_user
from app.http.responses import json_response

bp = Blueprint("me", __name__, url_prefix="/api/v1")


@bp.get("/me")
def me() -> Response:
    """Return the logged user ``{source, id, shownName}`` named by the cookie token, or 401."""
    return json_response(authenticated_cookie_user())
