"""What every end of a session shares, whoever asks (the user, an admin, a command, a
change of USERS_FILE): the store's call, the cut-off in this worker at once, and one
security event (the request's log line, or an ``app`` line outside a request); and the
client a login records."""

from __future__ import annotations

import logging
from collections.abc import Callable

from flask import Flask, has_request_context, request

from app.backends.interface import BackendUnavailable, LoginClient
from app.events import Event
from app.extensions import CUTOFFS, get_cutoffs, get_store
from app.http.request_log import note
from app.sessions.cutoffs import CutoffCache

logger = logging.getLogger(__name__)


def login_client() -> LoginClient:
    """Return the client of the current request as a session records it: the address the
    request log reads, and the User-Agent as sent (the store cuts it)."""
    return LoginClient(
        request.environ.get("REMOTE_ADDR") or "", request.headers.get("User-Agent", "")
    )


def end_session(username: str, session_id: str) -> bool:
    """End ``username``'s session ``session_id`` (False: no such session of that user),
    and record the security event."""
    ended = get_store().end_session(username, session_id)
    if ended:
        _record(Event.SESSION_ENDED, username)
    return ended


def log_out_everywhere(username: str) -> int:
    """Log ``username`` out everywhere, now: every session ends, and every access token
    issued until now is refused (on this worker at once, on the others within
    SESSION_CUTOFF_REFRESH seconds); record the security event; return how many ended."""
    ended = get_cutoffs().log_out_everywhere(username)
    _record(Event.LOGGED_OUT_EVERYWHERE, username)
    return ended


def record_sessions_ended_by_the_limit(username: str, ended: int) -> None:
    """Record the ``ended`` sessions REFRESH_TOKENS_PER_USER ended to make room for a login
    of ``username``: a note on the login's line (``sessions_ended``), and the security
    event of its own, an ``app`` line, since the login's line holds the login's."""
    if not ended:
        return
    note(sessions_ended=str(ended))
    logger.info(
        "%s: %r, %d by REFRESH_TOKENS_PER_USER",
        Event.SESSION_ENDED,
        username,
        ended,
        extra={"event": Event.SESSION_ENDED, "user": username},
    )


def _record(event: Event, username: str) -> None:
    if has_request_context():
        note(event=event)  # the request's own line: its user is the caller
    else:
        logger.info("%s: %r", event, username, extra={"event": event, "user": username})


def log_out_changed_users(app: Flask) -> Callable[[list[str], int], None]:
    """Return what the user directory calls when USERS_FILE changed users' passwords or
    removed them: each is logged out everywhere as of the change (the file's mtime, a
    whole second), so that a login with the new password, made after it, is kept however
    late another worker sees the change, and every worker may call it (it is idempotent)."""

    def log_out(usernames: list[str], at: int) -> None:
        cutoffs: CutoffCache = app.extensions[CUTOFFS]
        for username in usernames:
            try:
                ended = cutoffs.log_out_everywhere(username, at)
            except BackendUnavailable as error:
                logger.error(
                    "USERS_FILE changed %r, but the sessions could not be ended: %s",
                    username,
                    error,
                )
                continue
            if ended:
                logger.info(
                    "%s: %r (USERS_FILE changed)",
                    Event.LOGGED_OUT_EVERYWHERE,
                    username,
                    extra={"event": Event.LOGGED_OUT_EVERYWHERE, "user": username},
                )

    return log_out
