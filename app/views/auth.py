"""Login, access-token refresh and refresh-token revocation."""

from __future__ import annotations

import hmac

from flask import Blueprint, Response, current_app, jsonify, request
from flask.blueprints import BlueprintSetupState
from werkzeug.exceptions import BadRequest, Unauthorized
from werkzeug.routing import BaseConverter

from app.config import current_settings
from app.request_body import optional_string, read_fields, required_string
from app.responses import bodiless
from app.store import get_store, shown_digest
from app.tokens import MAX_USERNAME_LENGTH, issue_access_token, new_refresh_token, role_for

bp = Blueprint("auth", __name__)


class AnyTextConverter(BaseConverter):
    """Match any non-empty path text, slashes included (``path`` refuses a leading one)."""

    regex = ".+"
    part_isolating = False


@bp.record_once
def register_converter(state: BlueprintSetupState) -> None:
    """Let a refresh token in a path be any text, so that every unknown one is a 204."""
    state.app.url_map.converters.setdefault("any_text", AnyTextConverter)


@bp.post("/login")
def login() -> Response:
    """Issue an access token and a refresh token; the password is not checked."""
    fields = read_fields()
    username = required_string(fields, "username", MAX_USERNAME_LENGTH)
    optional_string(fields, "password")
    refresh_token = new_refresh_token()
    get_store().issue(refresh_token, username)
    role = _role(username)
    current_app.logger.info(
        "login: username=%r role=%s client=%s", username, role, request.remote_addr
    )
    return jsonify(accessToken=_access_token(username, role), refreshToken=refresh_token)


@bp.post("/token")
def refresh() -> Response:
    """Issue a new access token for a refresh token recorded for exactly that username."""
    fields = read_fields()
    username = required_string(fields, "username", MAX_USERNAME_LENGTH)
    refresh_token = optional_string(fields, "refreshToken")
    if refresh_token is None:
        raise BadRequest("refreshToken is required")
    owner = get_store().owner_of(refresh_token) if refresh_token else None  # "" is unknown
    if owner is None or not hmac.compare_digest(owner.encode(), username.encode()):
        current_app.logger.info(
            "refresh refused: username=%r reason=%s client=%s",
            username,
            "unknown token" if owner is None else "token of another user",
            request.remote_addr,
        )
        raise Unauthorized()
    return jsonify(accessToken=_access_token(username, _role(username)))


@bp.after_request
def forbid_caching(response: Response) -> Response:
    """Keep token responses out of every cache (RFC 6749, section 5.1)."""
    response.headers["Cache-Control"] = "no-store"
    response.headers["Pragma"] = "no-cache"
    return response


@bp.delete("/token/<any_text:refresh_token>")
def revoke(refresh_token: str) -> Response:
    """Forget a refresh token; unknown tokens are ignored. Always 204."""
    known = get_store().revoke(refresh_token)
    digest = shown_digest(refresh_token)
    current_app.logger.info("revoke: digest=%s known=%s", digest, known)
    return bodiless(204)


def _role(username: str) -> str:
    return role_for(username, current_settings().admin_username)


def _access_token(username: str, role: str) -> str:
    settings = current_settings()
    return issue_access_token(username, role, settings.signing_keys, settings.access_token_lifetime)
