"""Login, access-token refresh and refresh-token revocation."""

from __future__ import annotations

import hmac
from typing import Any

from flask import Blueprint, Response, jsonify, request
from flask.blueprints import BlueprintSetupState
from werkzeug.exceptions import BadRequest, ServiceUnavailable, TooManyRequests, Unauthorized
from werkzeug.routing import BaseConverter

from app.auth.tokens import issue_access_token, new_refresh_token, role_for
from app.backends.interface import (
    BackendUnavailable,
    IdleSession,
    Outcome,
    shown_digest,
    successor_of,
)
from app.config.usernames import (
    CLIENT_USERNAME_PREFIX,
    MAX_USERNAME_LENGTH,
    token_username_problem,
    username_problem,
)
from app.events import Event, Reason
from app.extensions import (
    current_settings,
    get_clock,
    get_cutoffs,
    get_expected_claims,
    get_key_ring,
    get_login_failure_limit,
    get_rate_limiter,
    get_store,
    get_user_directory,
)
from app.http.request_body import missing, optional_string, read_fields, required_string
from app.http.request_log import note
from app.http.responses import bodiless
from app.limits.login_failures import DEVICE_COOKIE, DEVICE_COOKIE_LIFETIME
from app.sessions.ending import login_client, record_sessions_ended_by_the_limit

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
    verified = check_password(username, optional_string(fields, "password"))
    refresh_token = record_login(username, verified)
    response = jsonify(accessToken=access_token_for(username), refreshToken=refresh_token)
    failures = get_login_failure_limit()
    if verified is not None and failures is not None:  # this browser's logins count apart
        response.set_cookie(
            DEVICE_COOKIE,
            failures.device_cookie(username, verified),
            max_age=DEVICE_COOKIE_LIFETIME,
            path="/login",
            secure=current_settings().auth_cookie_secure,
            httponly=True,
            samesite="Strict",
        )
    return response


def record_login(username: str, verified: str | None) -> str:
    """Record a new refresh token for ``username``, whose password (hash ``verified``, None
    without a user directory) was just checked, and return it; 401 if the user changed."""
    refresh_token = new_refresh_token()
    store = get_store()
    issued = store.issue(refresh_token, username, login_client())
    users = get_user_directory()
    if users is not None and verified is not None and not users.still_holds(username, verified):
        # `flask users` changed or removed the user after the password was checked, and may
        # have revoked the user's tokens before this one was recorded
        store.revoke(refresh_token)
        note(reason=Reason.BAD_CREDENTIALS, event=Event.LOGIN_FAILED)
        raise Unauthorized()
    note(user=username, event=Event.LOGIN)  # the request log's line is the login's record
    record_sessions_ended_by_the_limit(username, issued.ended)
    get_cutoffs().wait_out(username, issued.cutoff)
    return refresh_token


@bp.post("/token")
def refresh() -> Response:
    """Issue a new access token for a refresh token recorded for exactly that username.

    With REFRESH_TOKEN_ROTATION, also a new refresh token that replaces the one presented.
    """
    limit_rate("token")
    fields = read_fields()
    username = presented_username(fields)
    refresh_token = optional_string(fields, "refreshToken")
    if refresh_token is None:
        raise BadRequest("refreshToken is required")
    if username_problem(username) is not None or reserved_for_clients(username):
        # no login recorded a token for it (or one did before CLIENTS_FILE reserved it)
        note(reason=Reason.UNKNOWN_REFRESH_TOKEN, event=Event.REFRESH_FAILED)
        raise Unauthorized()
    if current_settings().refresh_token_rotation:
        access_token, successor = rotated_tokens(refresh_token, username)
        return jsonify(accessToken=access_token, refreshToken=successor)
    owner = get_store().owner_of(refresh_token) if refresh_token else None  # "" is unknown
    if isinstance(owner, IdleSession):
        note_idle_session(owner.owner)
        raise Unauthorized()
    if owner is None or not hmac.compare_digest(owner.encode(), username.encode()):
        note(
            reason=Reason.UNKNOWN_REFRESH_TOKEN if owner is None else Reason.ANOTHER_USERS_TOKEN,
            event=Event.REFRESH_FAILED,
        )
        raise Unauthorized()
    refuse_unknown_user(username)
    note(user=username, event=Event.REFRESH)
    get_cutoffs().wait_out(username)
    return jsonify(accessToken=access_token_for(username))


def rotated_tokens(refresh_token: str, username: str | None) -> tuple[str, str]:
    """Return a new access token and the successor that replaces ``refresh_token`` (rotation),
    whose reuse is caught; 401 for an unknown token, another user's, or a reuse.

    ``username`` None (the OAuth refresh grant, which names no user) takes the token's
    owner, whoever it is, so that a reuse there ends the family as at ``POST /token``.
    """
    successor = successor_of(refresh_token)  # it carries the family's lineage
    rotation = get_store().rotate(refresh_token, successor, username) if refresh_token else None
    if rotation is None or rotation.outcome is Outcome.UNKNOWN:
        note(reason=Reason.UNKNOWN_REFRESH_TOKEN, event=Event.REFRESH_FAILED)
        raise Unauthorized()
    if rotation.outcome is Outcome.OTHER_USER:
        note(reason=Reason.ANOTHER_USERS_TOKEN, event=Event.REFRESH_FAILED)
        raise Unauthorized()
    owner = rotation.owner
    if rotation.outcome is Outcome.IDLE:
        note_idle_session(owner)
        raise Unauthorized()
    if rotation.outcome is Outcome.REUSED:
        # the family's owner; the family's digest, no token
        note(
            user=owner,
            reason=Reason.REUSED_REFRESH_TOKEN,
            event=Event.REFRESH_TOKEN_REUSE,
            family=rotation.family,
        )
        raise Unauthorized()
    if reserved_for_clients(owner):  # recorded before CLIENTS_FILE reserved the name
        get_store().revoke(successor)
        note(reason=Reason.UNKNOWN_REFRESH_TOKEN, event=Event.REFRESH_FAILED)
        raise Unauthorized()
    if not in_directory(owner):
        get_store().revoke(successor)  # the family with it: no user, no session
        note(user=owner, reason=Reason.USER_NOT_IN_DIRECTORY, event=Event.REFRESH_FAILED)
        raise Unauthorized()
    event = Event.REFRESH_TOKEN_RETRY if rotation.outcome is Outcome.RETRIED else Event.REFRESH
    note(user=owner, event=event, family=rotation.family)
    get_cutoffs().wait_out(owner)
    return access_token_for(owner), successor


def note_idle_session(owner: str) -> None:
    """Log the end of ``owner``'s session that a refresh found idle (the store removed it)."""
    note(user=owner, reason=Reason.IDLE_SESSION, event=Event.SESSION_ENDED)


def in_directory(username: str) -> bool:
    """Return whether ``username`` may be refreshed: a user of USERS_FILE, or any without one.

    Asked only once the refresh token matched the username, so that how long a refusal
    takes tells nothing about which usernames exist.
    """
    users = get_user_directory()
    return users is None or users.has(username)


def refuse_unknown_user(username: str) -> None:
    """401 for a refresh token of a username the user directory no longer holds."""
    if not in_directory(username):
        note(user=username, reason=Reason.USER_NOT_IN_DIRECTORY, event=Event.REFRESH_FAILED)
        raise Unauthorized()


def presented_username(fields: dict[str, Any]) -> str:
    """Return the username of a /token body, any string: 400 only if missing or not one.

    A string that login would refuse is no 400 here: no refresh token is recorded for it,
    so SPEC.md's answer to it is the 401 of a token recorded for another username.
    """
    username = fields.get("username")
    if username is None:
        raise missing(fields, "username")
    if not isinstance(username, str):
        raise BadRequest("username must be a string")
    return username


def required_username(fields: dict[str, Any]) -> str:
    """Return the body's username, or 400 saying why no token may carry it."""
    username = required_string(fields, "username", MAX_USERNAME_LENGTH)
    problem = token_username_problem(username)
    if problem is not None:
        raise BadRequest(f"username {problem}")
    if reserved_for_clients(username):
        raise BadRequest(f"username must not start with {CLIENT_USERNAME_PREFIX!r}")
    return username


def reserved_for_clients(username: str) -> bool:
    """Return whether ``username`` names a registered client (``client:<id>``, with
    CLIENTS_FILE), which no login, and no refresh token recorded before, may act as."""
    return username.startswith(CLIENT_USERNAME_PREFIX) and bool(current_settings().clients_file)


def check_password(username: str, password: str | None) -> str | None:
    """With a user directory (USERS_FILE), 401 unless ``password`` is ``username``'s; return
    the hash it matched (None without a directory).

    Over LOGIN_FAILURE_LIMIT for the username, 429 before the password is checked; with a
    device cookie that a login of the username was given under its current password, over
    the limit for that cookie. Known or not, a username gets the same answers, and the same
    line in the log, without the name: whether it exists shows nowhere, and a "username"
    may be a misplaced password.
    """
    users = get_user_directory()
    if users is None:
        return None  # SPEC.md's open login
    if password is None:
        raise BadRequest("password is required")
    failures = get_login_failure_limit()
    device = None
    if failures is not None:
        cookie = request.cookies.get(DEVICE_COOKIE)
        device = failures.device_of(username, users.hash_of(username), cookie)
        try:
            wait = failures.attempt(username, device)
        except BackendUnavailable:
            note(rate_limit_error="1")
            raise ServiceUnavailable(
                "login is unavailable, try again shortly", retry_after=1
            ) from None
        if wait is not None:
            note(reason=Reason.LOGIN_LIMITED, event=Event.LOGIN_LIMITED)
            raise TooManyRequests(LOGIN_LIMITED_MESSAGE, retry_after=wait)
    verified = users.authenticate(username, password)
    if verified is None:
        note(reason=Reason.BAD_CREDENTIALS, event=Event.LOGIN_FAILED)
        raise Unauthorized()
    if failures is not None:
        failures.succeeded(username, device)
    return verified


def limit_rate(endpoint: str) -> None:
    """Count the request to ``endpoint`` (``login``, ``token``, ``revoke``) against
    RATE_LIMIT_AUTH; 429 with Retry-After over the limit."""
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
    """Forget a refresh token; unknown tokens are ignored: 204 either way (429 over
    RATE_LIMIT_AUTH, counted as its own endpoint, before the store is reached).

    An old token of a rotated family ends the family, as its reuse at /token does.
    """
    limit_rate("revoke")
    revoke_refresh_token(refresh_token)
    return bodiless(204)


def revoke_refresh_token(refresh_token: str) -> None:
    """Forget a refresh token (an old one of a rotated family ends the family) and note
    what happened on the request's line; ``DELETE /token/...`` and ``/oauth/revoke``."""
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


def access_token_for(username: str) -> str:
    """Return an access token for ``username`` with the role the settings give it."""
    settings = current_settings()
    role = role_for(username, settings.admin_username)
    return issue_access_token(
        username,
        role,
        get_key_ring(),
        settings.access_token_lifetime,
        clock=get_clock(),
        expected=get_expected_claims(),
    )
