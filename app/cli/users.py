"""``flask users ...``: add, remove and list the users of USERS_FILE (Argon2id hashes)."""

from __future__ import annotations

import logging
import logging.config
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import click
from flask import current_app
from flask.cli import AppGroup
from flask.logging import default_handler

from app.auth.users import (
    HASHER,
    MIN_PASSWORD_LENGTH,
    UsersFileError,
    change_users,
    read_users_file,
)
from app.backends.interface import BackendUnavailable
from app.cli.arguments import read_one_line, valid_username
from app.config.usernames import CLIENT_USERNAME_PREFIX, username_problem
from app.events import Event
from app.extensions import current_settings, get_clock, get_store
from app.observability.logging_config import logging_config

#: The longest password ``flask users add`` takes.
MAX_PASSWORD_LENGTH = 1024

users = AppGroup("users", help="Add, remove and list the users of USERS_FILE (Argon2id hashes).")


def command_logging() -> None:
    """Have an operator command log as the service does: its security events are lines
    in the service's log format."""
    if not logging.getLogger().handlers:  # a `flask` command: gunicorn set nothing up
        settings = current_settings()
        logging.config.dictConfig(logging_config(settings.log_format, settings.log_level))
        current_app.logger.removeHandler(default_handler)  # Flask's own, other format


def log_event(event: Event, message: str, *args: object, **fields: str) -> None:
    """Log an operator command's security event: one line in the service's log format."""
    command_logging()
    current_app.logger.info(message, *args, extra={"event": event, **fields})


def users_file() -> str:
    """Return USERS_FILE, or stop with one line when it is unset."""
    path = current_settings().users_file
    if path is None:
        raise click.ClickException("USERS_FILE is not set: set it to the user directory's file")
    return path


def directory_username(context: click.Context, parameter: click.Parameter, value: str) -> str:
    """Refuse a name that the user directory cannot hold."""
    value = valid_username(context, parameter, value)
    problem = username_problem(value)
    if problem:
        raise click.BadParameter(problem, context, parameter)
    return value


def read_password() -> str:
    """Return a new password: from standard input, or asked twice, hidden, on a terminal."""
    if sys.stdin.isatty():
        password: str = click.prompt(
            "password", hide_input=True, confirmation_prompt=True, err=True
        )
    else:
        password = read_one_line("the password", MAX_PASSWORD_LENGTH)
    if len(password) > MAX_PASSWORD_LENGTH:
        raise click.UsageError(f"the password is longer than {MAX_PASSWORD_LENGTH} characters")
    if len(password) < MIN_PASSWORD_LENGTH:
        raise click.UsageError(
            f"the password must be at least {MIN_PASSWORD_LENGTH} characters"
            " (given on standard input, or typed twice at the prompt)"
        )
    return password


@contextmanager
def users_file_errors(path: str) -> Iterator[None]:
    """Turn a file that cannot be read or written into a one-line error and exit status 1."""
    try:
        yield
    except UsersFileError as error:
        raise click.ClickException(f"USERS_FILE {error}") from None
    except OSError as error:
        raise click.ClickException(f"USERS_FILE {path}: {error.strerror}") from None


def revoke_tokens(name: str, change: str) -> str:
    """Log ``name`` out everywhere as of the change (the file's mtime), after its entry in
    the file changed: every session begun by then ends, and every access token issued by
    then is refused; return what to print of it. Exit status 1, saying what to run, when
    the store cannot answer.

    The file is written first: a login checked against the old entry and recording its
    token after this revocation finds the new entry and takes its token back; a login
    with the new password, after the change, is kept (the workers that read the file
    again log the user out as of the same second: nothing more).
    """
    try:
        revoked = get_store().log_out_everywhere(name, _change_time())
    except BackendUnavailable as error:
        raise click.ClickException(
            f"{change}, but its refresh tokens were not revoked, the token store is"
            f" unavailable: {error}; run `flask sessions end {name}` once it answers"
        ) from None
    return f"revoked {revoked} refresh token{'' if revoked == 1 else 's'}"


def _change_time() -> int:
    """Return the second of the change just written: the file's mtime (now if unreadable)."""
    try:
        return int(os.stat(users_file()).st_mtime)
    except OSError:
        return int(get_clock()())


@users.command("add")
@click.argument("name", callback=directory_username)
@click.option("--replace", is_flag=True, help="Give an existing user a new password.")
def add_user_command(name: str, replace: bool) -> None:
    """Add the user NAME; the password is read from standard input, or asked for twice.

    Every refresh token of NAME is revoked, with a new password as with a new user.
    """
    path = users_file()
    if name.startswith(CLIENT_USERNAME_PREFIX) and current_settings().clients_file:
        raise click.UsageError(f"{CLIENT_USERNAME_PREFIX!r} starts the registered clients' names")
    hashed = HASHER.hash(read_password())
    existed = False

    def add(directory: dict[str, str]) -> bool:
        nonlocal existed
        existed = name in directory
        if existed != replace:  # --replace is for a user that exists, and only for one
            return False
        directory[name] = hashed
        return True

    with users_file_errors(path):
        changed = change_users(path, add)
    if not changed and replace:
        raise click.ClickException(f"no user {name!r} in {path}; add it without --replace")
    if not changed:
        raise click.ClickException(f"the user {name!r} exists; --replace sets a new password")
    if existed:
        log_event(Event.USER_PASSWORD_CHANGED, "user password changed: %r", name, user=name)
        done = f"new password for {name!r}"
    else:  # tokens issued to the name before (an open login, say) are not this user's
        log_event(Event.USER_ADDED, "user added: %r", name, user=name)
        done = f"added {name!r}"
    click.echo(f"{done}; {revoke_tokens(name, done)}")


@users.command("remove")
@click.argument("name", callback=valid_username)
def remove_user_command(name: str) -> None:
    """Remove the user NAME and revoke every refresh token of NAME."""
    path = users_file()
    with users_file_errors(path):
        removed = change_users(path, lambda directory: directory.pop(name, None) is not None)
    if not removed:
        raise click.ClickException(f"no user {name!r} in {path}")
    log_event(Event.USER_REMOVED, "user removed: %r", name, user=name)
    done = f"removed {name!r}"
    click.echo(f"{done}; {revoke_tokens(name, done)}")


@users.command("list")
def list_users_command() -> None:
    """List the users, one name a line, sorted."""
    path = users_file()
    with users_file_errors(path):
        try:
            directory = read_users_file(path)
        except FileNotFoundError:
            directory = {}
    for name in sorted(directory):
        click.echo(name)
    if not directory:
        click.echo(f"no users in {path}", err=True)
