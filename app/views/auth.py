"""Login, access-token refresh and refresh-token revocation."""

from __future__ import annotations

import hmac
from typing import Any

from flask import Blueprint, Response, request
from flask.blueprints import BlueprintSetupState
from werkzeug.exceptions import BadRequest, ServiceUnavailable, TooManyRequests, Unauthorized
from werkzeug.routing import BaseConverter

from app.events import Event, Reason
from app.keys import get_key_ring
from app.rate_limit import CountersUnavailableError, get_rate_limiter
from app.rate_limit.login_failures import get_login_failure_limit
from app.request_body import optional_string, read_fields, required_string
from app.request_log import note
from app.responses import bodiless, json_response
from app.settings import current_settings
from app.store import Outcome, get_store, shown_digest, successor_of
from app.tokens import (
    MAX_USERNAME_LENGTH,
    issue_access_token,
    new_refresh_token,
    role_for,
    token_username_problem,
)
from app.users import get_user_directory

#: The 429 of LOGIN_FAILURE_LIMIT, the same for every username, known or not.
LOGIN_LIMITED_MESSAGE = "too many failed logins for this username, try again later"

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
    """Issue an access token and a refresh token.

    The password is checked only with a user directory (USERS_FILE); without one,
    any username is accepted, as SPEC.md says.
    """
    limit_rate("login")
    fields = read_fields()
    username = required_username(fields)
    check_password(username, optional_string(fields, "password"))
    refresh_token = new_refresh_token()
    get_store().issue(refresh_token, username)
    note(user=username, event=Event.LOGIN)  # the request log's line is the login's record
    return json_response({"accessToken": _access_token(username), "refreshToken": refresh_token})


@bp.post("/token")
def refresh() -> Response:
    """Issue a new access token for a refresh token recorded for exactly that username.

    With REFRESH_TOKEN_ROTATION, also a new refresh token that replaces the one presented.
    """
    limit_rate("token")
    fields = read_fields()
    username = required_username(fields)
    refresh_token = optional_string(fields, "refreshToken")
    if refresh_token is None:
        raise BadRequest("refreshToken is required")
    if current_settings().refresh_token_rotation:
        return _rotate(refresh_token, username)
    owner = get_store().owner_of(refresh_token) if refresh_token else None  # "" is unknown
    if owner is None or not hmac.compare_digest(owner.encode(), username.encode()):
        note(
            reason=Reason.UNKNOWN_REFRESH_TOKEN if owner is None else Reason.ANOTHER_USERS_TOKEN,
            event=Event.REFRESH_FAILED,
        )
        raise Unauthorized()
    note(user=username, event=Event.REFRESH)
    return json_response({"accessToken": _access_token(username)})


def _rotate(refresh_token: str, username: str) -> Response:
    """Answer /token with rotation: a successor replaces the token, and its reuse is caught."""
    successor = successor_of(refresh_token)  # it carries the family's lineage
    rotation = get_store().rotate(refresh_token, successor, username) if refresh_token else None
    if rotation is None or rotation.outcome is Outcome.UNKNOWN:
        note(reason=Reason.UNKNOWN_REFRESH_TOKEN, event=Event.REFRESH_FAILED)
        raise Unauthorized()
    if rotation.outcome is Outcome.OTHER_USER:
        note(reason=Reason.ANOTHER_USERS_TOKEN, event=Event.REFRESH_FAILED)
        raise Unauthorized()
    if rotation.outcome is Outcome.REUSED:
        # the family's owner, as the username matched it; the family's digest, no token
        note(
            user=username,
            reason=Reason.REUSED_REFRESH_TOKEN,
            event=Event.REFRESH_TOKEN_REUSE,
            family=rotation.family,
        )
        raise Unauthorized()
    event = Event.REFRESH_TOKEN_RETRY if rotation.outcome is Outcome.RETRIED else Event.REFRESH
    note(user=username, event=event, family=rotation.family)
    return json_response({"accessToken": _access_token(username), "refreshToken": successor})


def required_username(fields: dict[str, Any]) -> str:
    """Return the body's username, or 400 saying why no token may carry it."""
    username = required_string(fields, "username", MAX_USERNAME_LENGTH)
    problem = token_username_problem(username)
    if problem is not None:
        raise BadRequest(f"username {problem}")
    return username


def check_password(username: str, password: str | None) -> None:
    """With a user directory (USERS_FILE), 401 unless ``password`` is ``username``'s.

    Over LOGIN_FAILURE_LIMIT for the username, 429 before the password is checked. Known
    or not, a username gets the same answers, and the same line in the log, without the
    name: whether it exists shows nowhere, and a "username" may be a misplaced password.
    """
    users = get_user_directory()
    if users is None:
        return  # SPEC.md's open login
    if password is None:
        raise BadRequest("password is required")
    failures = get_login_failure_limit()
    if failures is not None:
        try:
            wait = failures.attempt(username)
        except CountersUnavailableError:
            note(rate_limit_error="1")
            raise ServiceUnavailable(
                "login is unavailable, try again shortly", retry_after=1
            ) from None
        if wait is not None:
            note(reason=Reason.LOGIN_LIMITED, event=Event.LOGIN_LIMITED)
            raise TooManyRequests(LOGIN_LIMITED_MESSAGE, retry_after=wait)
    if not users.authenticate(username, password):
        note(reason=Reason.BAD_CREDENTIALS, event=Event.LOGIN_FAILED)
        raise Unauthorized()
    if failures is not None:
        failures.succeeded(username)


def limit_rate(endpoint: str) -> None:
    """Count the request against RATE_LIMIT_AUTH; 429 with Retry-After over the limit."""
    limiter = get_rate_limiter()
    if limiter is None:
        return
    wait = limiter.check(endpoint, request.remote_addr)
    if wait is not None:
        note(reason=Reason.RATE_LIMITED, event=Event.RATE_LIMITED)
        raise TooManyRequests("too many requests", retry_after=wait)


@bp.after_request
def forbid_caching(response: Response) -> Response:
    """Keep token responses out of every cache (RFC 6749, section 5.1)."""
    response.headers["Cache-Control"] = "no-store"
    response.headers["Pragma"] = "no-cache"
    return response


@bp.delete("/token/<any_text:refresh_token>")
def revoke(refresh_token: str) -> Response:
    """Forget a refresh token; unknown tokens are ignored. Always 204.

    An old token of a rotated family ends the family, as its reuse at /token does.
    """
    revocation = get_store().revoke(refresh_token)
    if revocation.reused:  # an old token's holder may be a thief erasing a theft's trace
        note(
            user=revocation.username,
            revoked=shown_digest(refresh_token),
            event=Event.REFRESH_TOKEN_REUSE,
            family=revocation.family,
        )
    elif revocation.known:
        note(event=Event.REVOKE, revoked=shown_digest(refresh_token))  # what operators see of it
    else:
        note(event=Event.REVOKE)
    return bodiless(204)


def _access_token(username: str) -> str:
    """Return an access token for ``username`` with the role the settings give it."""
    settings = current_settings()
    role = role_for(username, settings.admin_username)
    return issue_access_token(username, role, get_key_ring(), settings.access_token_lifetime)
