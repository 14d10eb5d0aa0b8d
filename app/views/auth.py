"""Login, access-token refresh and refresh-token revocation."""

from __future__ import annotations

import hmac

from flask import Blueprint, Response
from werkzeug.exceptions import BadRequest, Unauthorized
from werkzeug.routing import BaseConverter

from app.config import current_settings
from app.request_body import optional_string, read_fields, required_string
from app.request_log import note
from app.store import get_store, shown_digest
from app.tokens import MAX_USERNAME_LENGTH, issue_access_token, new_refresh_token, role_for
from app.views import bodiless, json_response

#: Why a refresh was refused, as the request log and the metrics name it.
UNKNOWN_REFRESH_TOKEN, ANOTHER_USERS_TOKEN = "unknown_refresh_token", "another_users_token"

bp = Blueprint("auth", __name__)


class AnyTextConverter(BaseConverter):
    """Match any non-empty path text, slashes included (``path`` refuses a leading one)."""

    regex = ".+"
    part_isolating = False


# A refresh token in a path is any text, so that every unknown one is simply a 204.
bp.record_once(lambda state: state.app.url_map.converters.setdefault("any_text", AnyTextConverter))


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
    """Issue a new access token for a refresh token recorded for exactly that username."""
    fields = read_fields()
    username = required_string(fields, "username", MAX_USERNAME_LENGTH)
    refresh_token = optional_string(fields, "refreshToken")
    if refresh_token is None:
        raise BadRequest("refreshToken is required")
    owner = get_store().owner_of(refresh_token) if refresh_token else None  # "" is unknown
    if owner is None or not hmac.compare_digest(owner.encode(), username.encode()):
        note(reason=UNKNOWN_REFRESH_TOKEN if owner is None else ANOTHER_USERS_TOKEN)
        raise Unauthorized()
    note(user=username, event="refreshed")
    return json_response({"accessToken": _access_token(username, _role(username))})


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
    return issue_access_token(
        username, role, settings.signing_secret, settings.access_token_lifetime
    )
