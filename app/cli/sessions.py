"""``flask sessions ...``: list a user's sessions, end one, or log the user out everywhere."""

from __future__ import annotations

import click
from flask.cli import AppGroup

from app.cli.arguments import valid_username
from app.cli.tokens import issue_time, store_errors
from app.cli.users import command_logging
from app.extensions import get_store
from app.observability.logging_config import quoted
from app.sessions.ending import end_session, log_out_everywhere

#: Sessions read from the store per call while listing them all.
LIST_PAGE_SIZE = 100

sessions = AppGroup("sessions", help="List a user's sessions, and end one or all of them.")


@sessions.command("list")
@click.argument("username", callback=valid_username)
def list_command(username: str) -> None:
    """List USERNAME's sessions, newest login first: id, login and last use (UTC), client
    address and User-Agent (quoted, with anything unprintable escaped)."""
    store = get_store()
    shown = 0
    after: str | None = None
    while True:
        with store_errors():
            page = store.sessions_of(username, limit=LIST_PAGE_SIZE, after=after)
        for session in page.sessions:
            click.echo(
                f"{session.id}  {issue_time(session.logged_in_at)}"
                f"  {issue_time(session.last_used_at)}  {quoted(session.address or '-')}"
                f"  {quoted(session.user_agent)}"
            )
        shown += len(page.sessions)
        if page.next is None:
            break
        after = page.next
    if not shown:
        click.echo(f"no sessions for {username!r}", err=True)


@sessions.command("end")
@click.argument("username", callback=valid_username)
@click.argument("session_id", required=False)
def end_command(username: str, session_id: str | None) -> None:
    """End USERNAME's session SESSION_ID (from `list`): its refresh tokens are revoked.
    With no SESSION_ID, log USERNAME out everywhere: every session ends, and every access
    token issued until now is refused (on every host within SESSION_CUTOFF_REFRESH s).
    An id that begins with "-" (made before ids stopped doing so) follows "--"."""
    command_logging()  # the security event is a line of the service's log
    if session_id is not None:
        with store_errors():
            ended = end_session(username, session_id)
        if not ended:
            raise click.ClickException(f"{username!r} has no session {session_id!r}")
        click.echo(f"ended the session {session_id} of {username!r}")
        return
    with store_errors():
        count = log_out_everywhere(username)
    click.echo(
        f"logged {username!r} out everywhere: ended {count} session{'' if count == 1 else 's'};"
        " access tokens issued until now are refused"
    )
