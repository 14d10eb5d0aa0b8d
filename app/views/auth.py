"""Login, access-token refresh and refresh-token revocation."""

from __future__ import annotations

import hmac
import logging

from flask import Blueprint, Response, current_app
from flask.blueprints import BlueprintSetupState
from werkzeug.exceptions import BadRequest, Unauthorized
from werkzeug.routing import BaseConverter

from app.config import current_settings
from app.request_body import optional_string, read_fields, required_string
from app.request_log import note
from app.responses import bodiless, json_response
from app.store import Outcome, get_store, shown_digest
from app.tokens import MAX_USERNAME_LENGTH, issue_access_token, new_refresh_token, role_for

#: Why a refresh was refused, as the request log and the metrics name it.
UNKNOWN_REFRESH_TOKEN, ANOTHER_USERS_TOKEN = "unknown_refresh_token", "another_users_token"
#: Why a rotation was refused: a retired token presented again (RFC 9700 4.14.2).
REUSED_REFRESH_TOKEN = "reused_refresh_token"  # noqa: S105 (a reason, not a token)

bp = Blueprint("auth", __name__)


class AnyTextConverter(BaseConverter):
    """Match any non-empty path text, slashes included (``path`` refuses a leading one)."""

    regex = r"[\s\S]+"  # "." would stop at a newline, which %0A spells in a path
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
    note(user=username, event="issued")  # the request log's line is the login's record
    return json_response(
        {"accessToken": _access_token(username, _role(username)), "refreshToken": refresh_token}
    )


@bp.post("/token")
def refresh() -> Response:
    """Issue a new access token for a refresh token recorded for exactly that username.

    With REFRESH_TOKEN_ROTATION, also a new refresh token that replaces the one presented.
    """
    fields = read_fields()
    username = required_string(fields, "username", MAX_USERNAME_LENGTH)
    refresh_token = optional_string(fields, "refreshToken")
    if refresh_token is None:
        raise BadRequest("refreshToken is required")
    if current_settings().refresh_token_rotation:
        return _rotate(refresh_token, username)
    owner = get_store().owner_of(refresh_token) if refresh_token else None  # "" is unknown
    if owner is None or not hmac.compare_digest(owner.encode(), username.encode()):
        note(reason=UNKNOWN_REFRESH_TOKEN if owner is None else ANOTHER_USERS_TOKEN)
        raise Unauthorized()
    note(user=username, event="refreshed")
    return json_response({"accessToken": _access_token(username, _role(username))})


def _rotate(refresh_token: str, username: str) -> Response:
    """Answer /token with rotation: a successor replaces the token, and its reuse is caught."""
    successor = new_refresh_token()
    rotation = get_store().rotate(refresh_token, successor, username) if refresh_token else None
    if rotation is None or rotation.outcome is Outcome.UNKNOWN:
        note(reason=UNKNOWN_REFRESH_TOKEN)
        raise Unauthorized()
    if rotation.outcome is Outcome.OTHER_USER:
        note(reason=ANOTHER_USERS_TOKEN)
        raise Unauthorized()
    if rotation.outcome is Outcome.REUSED:
        note(reason=REUSED_REFRESH_TOKEN)
        _security_event(
            "refresh_token_reuse", username, rotation.family, "family revoked", logging.WARNING
        )
        raise Unauthorized()
    if rotation.outcome is Outcome.RETRIED:
        _security_event(
            "refresh_token_retry", username, rotation.family, "within the grace", logging.INFO
        )
    note(user=username)
    return json_response(
        {"accessToken": _access_token(username, _role(username)), "refreshToken": successor}
    )


def _security_event(event: str, username: str, family: str, effect: str, level: int) -> None:
    """Log a retired refresh token presented again: one line, the family's digest, no token."""
    current_app.logger.log(
        level,
        "%s: username=%r family=%s %s",
        event,
        username,
        family,
        effect,
        extra={"event": event, "username": username, "family": family},
    )


@bp.after_request
def forbid_caching(response: Response) -> Response:
    """Keep token responses out of every cache (RFC 6749, section 5.1)."""
    response.headers["Cache-Control"] = "no-store"
    response.headers["Pragma"] = "no-cache"
    return response


@bp.delete("/token/<any_text:refresh_token>")
def revoke(refresh_token: str) -> Response:
    """Forget a refresh token; unknown tokens are ignored. Always 204."""
    if get_store().revoke(refresh_token):
        note(revoked=shown_digest(refresh_token), event="revoked")  # a digest prefix
    return bodiless(204)


def _role(username: str) -> str:
    return role_for(username, current_settings().admin_username)


def _access_token(username: str, role: str) -> str:
    settings = current_settings()
    return issue_access_token(username, role, settings.signing_keys, settings.access_token_lifetime)
