"""Sessions one can see and end: the caller's own (``/sessions``, any Bearer token) and any
user's (``/admin/users/<username>/sessions``, admins).

A session is a refresh-token family: one login and every token rotated from it. Ending one
revokes its refresh tokens; its access tokens live on until they expire, as after
``DELETE /token/{refreshToken}``. Logging a user out everywhere revokes every family and
sets the user's cut-off, which refuses every access token issued until then, on every host
within SESSION_CUTOFF_REFRESH seconds.
"""

from __future__ import annotations

import re
from typing import Any

from flask import Blueprint, Response, g, jsonify, request
from flask.blueprints import BlueprintSetupState
from werkzeug.exceptions import BadRequest, NotFound
from werkzeug.routing import BaseConverter

from app.backends.interface import Session
from app.config.usernames import MAX_USERNAME_LENGTH, token_username_problem
from app.extensions import get_store
from app.http.guards import requires_roles
from app.http.responses import bodiless
from app.sessions.ending import end_session, log_out_everywhere

#: Sessions per page: ``limit`` when the query names none, and the most it may ask for.
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100
#: The longest ``after`` cursor taken to the store; the store's own are far shorter.
MAX_CURSOR_LENGTH = 512
#: The one 404 of an id that names no session of that user, whoever else's it may be.
NO_SUCH_SESSION = "no such session"
NO_SUCH_USER = "no such user"
#: ``limit`` as written: ASCII digits only (``int`` would also take " 5", "5_0" or a fullwidth 5).
LIMIT = re.compile(r"[0-9]{1,3}")

bp = Blueprint("sessions", __name__)
#: The last segment of the paths that name all of a user's sessions.
ALL_SESSIONS = "sessions"


class UsernameConverter(BaseConverter):
    """Match any non-empty path text as a username, slashes included (a username may hold
    one; a WSGI server hands ``%2F`` over already decoded, as ``/``)."""

    regex = r"[\s\S]+"
    part_isolating = False


@bp.record_once
def register_converter(state: BlueprintSetupState) -> None:
    """Let the admin paths name any username."""
    state.app.url_map.converters.setdefault("username", UsernameConverter)


# --- the caller's own sessions ---------------------------------------------------------


@bp.get("/sessions")
@requires_roles()
def own_sessions() -> Response:
    """List the caller's sessions, newest login first, a page at a time."""
    return session_page(g.user["username"])


@bp.delete("/sessions/<session_id>")
@requires_roles()
def end_own_session(session_id: str) -> Response:
    """End one of the caller's sessions; another user's id is 404, as an unknown one."""
    return end_one(g.user["username"], session_id)


@bp.delete("/sessions")
@requires_roles()
def log_out_own_sessions() -> Response:
    """Log the caller out everywhere: every session, and every access token issued so far."""
    return end_all(g.user["username"])


# --- any user's, for admins -------------------------------------------------------------


@bp.get("/admin/users/<username:username>/sessions")
@requires_roles("admin")
def user_sessions(username: str) -> Response:
    """List a user's sessions, newest login first, a page at a time."""
    return session_page(known_username(username))


@bp.delete("/admin/users/<username:username>/sessions/<session_id>")
@requires_roles("admin")
def end_user_session(username: str, session_id: str) -> Response:
    """End one of a user's sessions.

    ``DELETE /admin/users/bob%2Fsessions/sessions``, the log out everywhere of the user
    ``bob/sessions``, routes here as ``bob``'s session ``sessions``, an id no session has
    (they are 22 characters and more): it is read as what it means.
    """
    if session_id == ALL_SESSIONS:
        return end_all(known_username(f"{username}/{ALL_SESSIONS}"))
    return end_one(known_username(username), session_id)


@bp.delete("/admin/users/<username:username>/sessions")
@requires_roles("admin")
def log_user_out_everywhere(username: str) -> Response:
    """Log a user out everywhere: every session, and every access token issued so far."""
    return end_all(known_username(username))


# --- the work of the views above --------------------------------------------------------


def known_username(username: str) -> str:
    """Return ``username``, or 404 when no login could ever have given it a session."""
    if len(username) > MAX_USERNAME_LENGTH or token_username_problem(username) is not None:
        raise NotFound(NO_SUCH_USER)
    return username


def session_page(username: str) -> Response:
    """Answer one page of ``username``'s sessions, as the query's ``limit`` and ``after`` ask."""
    limit, after = page_query()
    try:
        page = get_store().sessions_of(username, limit=limit, after=after)
    except ValueError:
        raise BadRequest("after is not a cursor of this list") from None
    return jsonify(sessions=[session_json(session) for session in page.sessions], next=page.next)


def page_query() -> tuple[int, str | None]:
    """Return the query's ``limit`` (1 to MAX_PAGE_SIZE) and ``after`` cursor, or 400."""
    arguments = request.args
    unknown = set(arguments) - {"limit", "after"}
    if unknown:
        raise BadRequest("the query takes only limit and after")
    limits = arguments.getlist("limit")
    cursors = arguments.getlist("after")
    if len(limits) > 1 or len(cursors) > 1:
        raise BadRequest("give limit and after at most once each")
    limit = DEFAULT_PAGE_SIZE
    if limits:
        if not LIMIT.fullmatch(limits[0]) or not 1 <= int(limits[0]) <= MAX_PAGE_SIZE:
            raise BadRequest(f"limit must be a whole number from 1 to {MAX_PAGE_SIZE}")
        limit = int(limits[0])
    after = cursors[0] if cursors else None
    if after is not None and not (0 < len(after) <= MAX_CURSOR_LENGTH and after.isprintable()):
        raise BadRequest("after is not a cursor of this list")
    return limit, after


def session_json(session: Session) -> dict[str, Any]:
    """Return what the API shows of a session (its user is the one asked about)."""
    return {
        "id": session.id,
        "loggedInAt": session.logged_in_at,
        "lastUsedAt": session.last_used_at,
        "address": session.address,
        "userAgent": session.user_agent,
    }


def end_one(username: str, session_id: str) -> Response:
    """End ``username``'s session ``session_id``: 204, or 404 when that user has none such.

    The end is a security event on the request's line (``app.sessions.end_session``); an
    id of another shape than a session id's costs the store no look-up.
    """
    if not end_session(username, session_id):
        raise NotFound(NO_SUCH_SESSION)
    return bodiless(204)


def end_all(username: str) -> Response:
    """Log ``username`` out everywhere (a security event on the request's line, from
    ``app.sessions.log_out_everywhere``); answer how many sessions ended.

    Any query is a 400: a request meant for one session (``DELETE /sessions?id=...``)
    must never end them all.
    """
    if request.query_string:
        raise BadRequest("logging out everywhere takes no query")
    return jsonify(ended=log_out_everywhere(username))
