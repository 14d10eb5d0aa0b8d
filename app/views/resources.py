"""Protected example resources, one per access rule."""

from __future__ import annotations

from flask import Blueprint, Response, g

from app.http.guards import requires_roles
from app.http.request_body import read_fields, required_number
from app.http.responses import json_response

bp = Blueprint("resources", __name__)


@bp.post("/restaurant-reservation")
@requires_roles()
def restaurant_reservation() -> Response:
    """Echo the reservation's guest count with the caller's claims."""
    guests_count = required_number(read_fields(), "guestsCount")
    return json_response({"user": g.user, "guestsCount": guests_count})


@bp.get("/user-accessible")
@requires_roles("user")
def user_accessible() -> Response:
    """Answer any authenticated user (admins included)."""
    return json_response({"message": "for all users", "user": g.user})


@bp.get("/admin-accessible")
@requires_roles("admin")
def admin_accessible() -> Response:
    """Answer admins only."""
    return json_response({"message": "for admins only", "user": g.user})
