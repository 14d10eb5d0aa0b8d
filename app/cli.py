"""Operator commands: ``flask tokens ...`` on the refresh-token store, for every backend,
``flask keys ...`` on the signing keys, and ``flask users ...`` on the user directory.

Tokens are shown by the first hex digits of their SHA-256 digest and their issue
time, never in clear: the store does not hold them in clear either. Keys are shown
by their kid, never a secret or a private key. Passwords are read from standard
input or a hidden prompt, never from the command line, and never shown.
"""

from __future__ import annotations

import logging
import logging.config
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import click
from flask import Flask, current_app
from flask.cli import AppGroup
from flask.logging import default_handler

from app.events import Event
from app.keys import (
    EDDSA,
    ES256,
    HS256,
    create_private_file,
    get_key_ring,
    new_private_key_pem,
    private_key_file,
)
from app.logging_config import logging_config
from app.settings import current_settings
from app.store import StoreUnavailableError, get_store, shown_digest
from app.users import (
    HASHER,
    MIN_PASSWORD_LENGTH,
    UsersFileError,
    change_users,
    read_users_file,
    username_problem,
)

#: Fewer hex digits than this could name a token the operator did not mean.
MIN_DIGEST_PREFIX = 8
HEX_PREFIX = re.compile(rf"[0-9a-fA-F]{{{MIN_DIGEST_PREFIX},64}}")
#: The longest line read from standard input as a refresh token.
MAX_TOKEN_LINE = 4096
#: The longest password ``flask users add`` takes.
MAX_PASSWORD_LENGTH = 1024

tokens = AppGroup("tokens", help="Count, list and revoke refresh tokens (never shown in clear).")
keys = AppGroup("keys", help="Make and show signing keys (shown by kid, never in clear).")
users = AppGroup("users", help="Add, remove and list the users of USERS_FILE (Argon2id hashes).")


def register_commands(app: Flask) -> None:
    """Add the operator commands to ``app``'s CLI."""
    app.cli.add_command(tokens)
    app.cli.add_command(keys)
    app.cli.add_command(users)


def log_event(event: Event, message: str, *args: object, **fields: str) -> None:
    """Log an operator command's security event: one line in the service's log format."""
    if not logging.getLogger().handlers:  # a `flask` command: gunicorn set nothing up
        settings = current_settings()
        logging.config.dictConfig(logging_config(settings.log_format, settings.log_level))
        current_app.logger.removeHandler(default_handler)  # Flask's own, other format
    current_app.logger.info(message, *args, extra={"event": event, **fields})


@contextmanager
def store_errors() -> Iterator[None]:
    """Turn an unreachable store into a one-line error and exit status 1."""
    try:
        yield
    except StoreUnavailableError as error:
        raise click.ClickException(f"the token store is unavailable: {error}") from None


def issue_time(timestamp: int) -> str:
    """Return a Unix time as ISO 8601 in UTC, to the second."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@tokens.command("count")
def count_command() -> None:
    """Print how many refresh tokens the store holds."""
    with store_errors():
        click.echo(get_store().count())


def valid_username(context: click.Context, parameter: click.Parameter, value: str) -> str:
    """Refuse a username the shell passed in bytes that are not UTF-8."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise click.BadParameter("not valid UTF-8", context, parameter) from None
    return value


@tokens.command("list")
@click.argument("username", callback=valid_username)
def list_command(username: str) -> None:
    """List USERNAME's refresh tokens, oldest first: digest prefix and issue time (UTC)."""
    with store_errors():
        records = get_store().tokens_of(username)
    for record in records:
        click.echo(f"{record.digest_prefix}  {issue_time(record.issued_at)}")
    if not records:
        click.echo(f"no refresh tokens for {username!r}", err=True)


@tokens.command("revoke-user")
@click.argument("username", callback=valid_username)
def revoke_user_command(username: str) -> None:
    """Revoke every refresh token of USERNAME (access tokens live on until they expire)."""
    with store_errors():
        revoked = get_store().revoke_all(username)
    click.echo(f"revoked {revoked} refresh token{'' if revoked == 1 else 's'} of {username!r}")


@tokens.command("revoke")
@click.argument("digest_prefix")
def revoke_command(digest_prefix: str) -> None:
    """Revoke the one refresh token whose digest starts with DIGEST_PREFIX (from `list`)."""
    if not HEX_PREFIX.fullmatch(digest_prefix):
        raise click.BadParameter(
            f"give {MIN_DIGEST_PREFIX} to 64 hex digits of a digest, as `flask tokens list` shows",
            param_hint="DIGEST_PREFIX",
        )
    with store_errors():
        revoked = get_store().revoke_digest(digest_prefix)
    if not revoked:
        raise click.ClickException(
            f"no single refresh token has a digest starting with {digest_prefix}: "
            "none does, or several do (give more digits)"
        )
    click.echo(f"revoked the refresh token {digest_prefix.lower()}")


@tokens.command("revoke-token")
def revoke_token_command() -> None:
    """Revoke the refresh token read from standard input (so no shell history keeps it)."""
    if sys.stdin.isatty():
        token = click.prompt("refresh token", hide_input=True, err=True)
    else:
        token = sys.stdin.readline(MAX_TOKEN_LINE)
    token = token.strip()
    if not token:
        raise click.UsageError("give the refresh token on standard input")
    with store_errors():
        known = get_store().revoke(token)
    shown = shown_digest(token)
    if known:
        click.echo(f"revoked the refresh token {shown}")
    else:
        click.echo(f"the refresh token {shown} was not known (revoked already?)")


@keys.command("generate")
@click.argument("path", type=click.Path(dir_okay=False, writable=True))
@click.option(
    "--algorithm",
    type=click.Choice([EDDSA, ES256]),
    help="EdDSA (Ed25519) or ES256 (P-256); default: SIGNING_ALGORITHM, or EdDSA with HS256.",
)
def generate_key_command(path: str, algorithm: str | None) -> None:
    """Write a new private key to PATH (mode 0600, never over a file) and print its kid."""
    if algorithm is None:
        configured = current_settings().signing_algorithm
        algorithm = EDDSA if configured == HS256 else configured
    try:
        created = create_private_file(path, new_private_key_pem(algorithm))
    except OSError as error:
        raise click.ClickException(f"cannot write {path}: {error.strerror}") from None
    if not created:
        raise click.ClickException(f"{path} exists; a key file is never overwritten")
    click.echo(private_key_file(path, algorithm).kid)


@keys.command("show")
def show_keys_command() -> None:
    """Print the current key and the previous ones: role, algorithm, kid and source."""
    ring = get_key_ring()
    for key in ring.keys:
        role = "current" if key is ring.current else "previous"
        click.echo(f"{role:<8}  {key.algorithm:<5}  {key.kid}  {key.source}")


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
        password = sys.stdin.readline(MAX_PASSWORD_LENGTH + 2).removesuffix("\n")
        password = password.removesuffix("\r")
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


@users.command("add")
@click.argument("name", callback=directory_username)
@click.option("--replace", is_flag=True, help="Give an existing user a new password.")
def add_user_command(name: str, replace: bool) -> None:
    """Add the user NAME; the password is read from standard input, or asked for twice."""
    path = users_file()
    hashed = HASHER.hash(read_password())
    existed = False

    def add(directory: dict[str, str]) -> bool:
        nonlocal existed
        existed = name in directory
        if existed and not replace:
            return False
        directory[name] = hashed
        return True

    with users_file_errors(path):
        changed = change_users(path, add)
    if not changed:
        raise click.ClickException(f"the user {name!r} exists; --replace sets a new password")
    if existed:
        log_event(Event.USER_PASSWORD_CHANGED, "user password changed: %r", name, user=name)
        click.echo(f"new password for {name!r}")
    else:
        log_event(Event.USER_ADDED, "user added: %r", name, user=name)
        click.echo(f"added {name!r}")


@users.command("remove")
@click.argument("name", callback=valid_username)
def remove_user_command(name: str) -> None:
    """Remove the user NAME (its refresh tokens stay: `flask tokens revoke-user NAME`)."""
    path = users_file()
    with users_file_errors(path):
        removed = change_users(path, lambda directory: directory.pop(name, None) is not None)
    if not removed:
        raise click.ClickException(f"no user {name!r} in {path}")
    log_event(Event.USER_REMOVED, "user removed: %r", name, user=name)
    click.echo(f"removed {name!r}")


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
