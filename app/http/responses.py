"""Small response builders that views share."""

from __future__ import annotations

from flask import Response


def bodiless(status: int, **headers: str) -> Response:
    """Return a response with no body, hence no Content-Type (204, or a bare redirect)."""
    response = Response(status=status, headers=headers)
    del response.headers["Content-Type"]
    return response
