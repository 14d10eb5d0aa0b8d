"""Operator commands: ``flask tokens ...`` on the refresh-token store, for every backend,
and ``flask keys ...`` on the signing keys.

Tokens are shown by the first hex digits of their SHA-256 digest and their issue
time, never in clear: the store does not hold them in clear either. Keys are shown
by their kid, never a secret or a private key.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import click
from flask import Flask
from flask.cli import AppGroup

from app.config import current_settings
from app.keys import EDDSA, ES256, HS256, create_private_file, new_private_key_pem, private_key_file
from app.store import StoreUnavailableError, get_store, shown_digest

#: Fewer hex digits than this could name a token the operator did not mean.
MIN_DIGEST_PREFIX = 8
HEX_PREFIX = re.compile(rf"[0-9a-fA-F]{{{MIN_DIGEST_PREFIX},64}}")
#: The longest line read from standard input as a refresh token.
MAX_TOKEN_LINE = 4096

tokens = AppGroup("tokens", help="Count, list and revoke refresh tokens (never shown in clear).")
keys = AppGroup("keys", help="Make and show signing keys (shown by kid, never in clear).")


def register_commands(app: Flask) -> None:
    """Add the operator commands to ``app``'s CLI."""
    app.cli.add_command(tokens)
    app.cli.add_command(keys)


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
    ring = current_settings().signing_keys
    for key in ring.keys:
        role = "current" if key is ring.current else "previous"
        click.echo(f"{role:<8}  {key.algorithm:<5}  {key.kid}  {key.source}")
