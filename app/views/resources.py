"""Protected example resources, one per access rule."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, g

from app.http.guards import requires_roles
from app.http.request_body import read_fields, required_number

bp = Blueprint("resources", __name__)


@bp.post("/restaurant-reservation")
@requires_roles()
def restaurant_reservation() -> dict[str, Any]:
    """Echo the reservation's guest count with the caller's claims."""
    guests_count = required_number(read_fields(), "guestsCount")
    return {"user": g.user, "guestsCount": guests_count}


@bp.get("/user-accessible")
@requires_roles("user")
def user_accessible() -> dict[str, Any]:
    """Answer any authenticated user (admins included)."""
    return {"message": "for all users", "user": g.user}


@bp.get("/admin-accessible")
@requires_roles("admin")
def admin_accessible() -> dict[str, Any]:
    """Answer admins only."""
    return {"message": "for admins only", "user": g.user}
