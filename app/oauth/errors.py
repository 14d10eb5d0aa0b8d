"""OAuth's error answers (RFC 6749, section 5.2): ``{"error": ..., "error_description": ...}``."""

from __future__ import annotations

from flask import Response, jsonify

#: The challenge of an ``invalid_client`` 401: the client authenticates with HTTP Basic.
CLIENT_CHALLENGE = 'Basic realm="oauth"'


class OAuthError(Exception):
    """An error a view raises; ``render_oauth_error`` answers it."""

    def __init__(self, error: str, description: str, status: int = 400) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.status = status


def invalid_client(description: str = "client authentication failed") -> OAuthError:
    return OAuthError("invalid_client", description, 401)


def invalid_request(description: str) -> OAuthError:
    return OAuthError("invalid_request", description)


def invalid_grant(description: str) -> OAuthError:
    return OAuthError("invalid_grant", description)


def render_oauth_error(error: OAuthError) -> Response:
    """Answer ``error`` as RFC 6749 says: JSON, never cached, a challenge with a 401."""
    response = jsonify(error=error.error, error_description=error.description)
    response.status_code = error.status
    response.headers["Cache-Control"] = "no-store"
    response.headers["Pragma"] = "no-cache"
    if error.status == 401:
        response.headers["WWW-Authenticate"] = CLIENT_CHALLENGE
    return response
