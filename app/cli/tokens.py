"""``flask tokens ...``: count, list and revoke the refresh tokens of the store."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import click
from flask.cli import AppGroup

from app.auth.tokens import REFRESH_TOKEN_LENGTH
from app.backends import backend_at
from app.backends.interface import BackendUnavailable, shown_digest
from app.backends.transfer import CopyRefusedError, copy_tokens
from app.cli.arguments import InputError, read_one_line, valid_username
from app.config.parsers import ConfigError, store_url
from app.extensions import current_settings, get_clock, get_store

#: Fewer hex digits than this could name a token the operator did not mean.
MIN_DIGEST_PREFIX = 8
HEX_PREFIX = re.compile(rf"[0-9a-fA-F]{{{MIN_DIGEST_PREFIX},64}}")
#: The longest line read from standard input as a refresh token.
MAX_TOKEN_LINE = 4096
#: Seconds each answer of a store may take during ``flask tokens copy``.
COPY_TIMEOUT = 60.0
#: What /login hands out (app/auth/tokens.py): anything else is no refresh token.
REFRESH_TOKEN = re.compile(rf"[A-Za-z0-9]{{{REFRESH_TOKEN_LENGTH}}}")

tokens = AppGroup(
    "tokens", help="Count, list, revoke and copy refresh tokens (never shown in clear)."
)


@contextmanager
def store_errors() -> Iterator[None]:
    """Turn an unreachable store into a one-line error and exit status 1."""
    try:
        yield
    except BackendUnavailable as error:
        raise click.ClickException(f"the token store is unavailable: {error}") from None


def issue_time(timestamp: int) -> str:
    """Return a Unix time as ISO 8601 in UTC, to the second."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@tokens.command("count")
def count_command() -> None:
    """Print how many refresh tokens the store holds."""
    with store_errors():
        click.echo(get_store().count())


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
        token = read_one_line("the refresh token", MAX_TOKEN_LINE)
    token = token.strip()
    if not token:
        raise click.UsageError("give the refresh token on standard input")
    if not REFRESH_TOKEN.fullmatch(token):  # never shown: it may be some other secret
        raise InputError(
            f"that is not a refresh token ({REFRESH_TOKEN_LENGTH} letters and digits, as /login"
            " gives); an access token cannot be revoked, it expires by itself"
        )
    with store_errors():
        known = get_store().revoke(token).known
    shown = shown_digest(token)
    if known:
        click.echo(f"revoked the refresh token {shown}")
    else:
        click.echo(f"the refresh token {shown} was not known (revoked already?)")


@tokens.command("copy")
@click.option(
    "--to",
    "target_url",
    required=True,
    metavar="URL",
    help="The store to copy into: a TOKEN_STORE_URL (sqlite:///..., redis://..., postgresql://...).",
)
def copy_command(target_url: str) -> None:
    """Copy every refresh token and deny entry of this store into the empty store at URL.

    Stop the service first: a token issued or revoked during the copy may be missed.
    A target that holds any token or deny entry is refused, as is this store itself:
    to run an interrupted copy again, empty the target first (docs/stores.md).
    """
    try:
        url = store_url("--to", target_url)
    except ConfigError as error:  # never echoes the URL, which may hold a password
        raise click.BadParameter(str(error).removeprefix("--to "), param_hint="--to") from None
    settings = current_settings()
    # both stores with the copy's own timeout: a batch of a copy may take far longer to
    # answer than a request's call, and a copy has no client waiting on it
    connect_timeout, clock = settings.store_connect_timeout, get_clock()
    source = backend_at(settings.token_store_url, COPY_TIMEOUT, connect_timeout, clock=clock)
    target = backend_at(url, COPY_TIMEOUT, connect_timeout, clock=clock)
    try:
        with store_errors():
            copied = copy_tokens(source.store, target.store)
    except CopyRefusedError as error:
        raise click.ClickException(str(error)) from None
    finally:
        source.close()
        target.close()
    click.echo(
        f"copied {copied.tokens} refresh tokens ({copied.live} live, the others retired by"
        f" rotation), {copied.denied} deny entries and {copied.cutoffs} users' cut-offs"
    )
