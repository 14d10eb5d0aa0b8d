"""``flask clients ...``: add, remove, list and rotate the secrets of the registered clients
of CLIENTS_FILE. A secret is generated, printed once on standard output, and stored only
as its SHA-256 digest (app/oauth/clients.py says why no slow hash)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click
from flask.cli import AppGroup

from app.auth.tokens import ROLES
from app.backends.interface import BackendUnavailable
from app.config.parsers import AUDIENCE
from app.config.usernames import CLIENT_USERNAME_PREFIX
from app.extensions import current_settings, get_clock, get_cutoffs
from app.oauth.clients import (
    Client,
    ClientsFileError,
    change_clients,
    client_id_problem,
    new_client_secret,
    read_clients_file,
    secret_digest,
)

clients = AppGroup(
    "clients", help="Add, remove, list and rotate the secrets of the clients of CLIENTS_FILE."
)


def clients_file() -> str:
    """Return CLIENTS_FILE, or stop with one line when it is unset."""
    path = current_settings().clients_file
    if path is None:
        raise click.ClickException("CLIENTS_FILE is not set: set it to the clients' file")
    return path


def valid_client_id(context: click.Context, parameter: click.Parameter, value: str) -> str:
    problem = client_id_problem(value)
    if problem:
        raise click.BadParameter(problem, context, parameter)
    return value


@contextmanager
def clients_file_errors(path: str) -> Iterator[None]:
    """Turn a file that cannot be read or written into a one-line error and exit status 1."""
    try:
        yield
    except ClientsFileError as error:
        raise click.ClickException(f"CLIENTS_FILE {error}") from None
    except OSError as error:
        raise click.ClickException(f"CLIENTS_FILE {path}: {error.strerror}") from None


def checked_audiences(audiences: tuple[str, ...]) -> tuple[str, ...]:
    """Refuse audiences the service would not accept its own tokens for."""
    settings = current_settings()
    for audience in audiences:
        if not AUDIENCE.fullmatch(audience):
            raise click.UsageError(f"--audience {audience[:40]!r} is not an audience")
        if audience not in settings.token_audience:
            raise click.UsageError(
                f"--audience {audience!r} is not in TOKEN_AUDIENCE: this service would"
                " refuse the client's own tokens"
            )
    return tuple(dict.fromkeys(audiences))


def cut_off_tokens(client_id: str, change: str) -> str:
    """Refuse every access token the client was given until now (a logout everywhere of
    its username), after its secret was changed or the client removed; return what to
    print of it. Exit status 1, saying what to run, when the store cannot answer."""
    username = f"{CLIENT_USERNAME_PREFIX}{client_id}"
    try:
        get_cutoffs().log_out_everywhere(username, int(get_clock()()))
    except BackendUnavailable as error:
        raise click.ClickException(
            f"{change}, but its access tokens were not cut off, the token store is"
            f" unavailable: {error}; run `flask sessions end {username}` once it answers"
        ) from None
    return "its access tokens issued until now are refused"


@clients.command("add")
@click.argument("client_id", callback=valid_client_id)
@click.option("--role", type=click.Choice(ROLES), default="user", show_default=True)
@click.option(
    "--audience", "audiences", multiple=True, help="An aud of its tokens (of TOKEN_AUDIENCE)."
)
def add_client_command(client_id: str, role: str, audiences: tuple[str, ...]) -> None:
    """Register CLIENT_ID and print its new secret, once."""
    path = clients_file()
    audiences = checked_audiences(audiences)
    secret = new_client_secret()

    def add(registered: dict[str, Client]) -> bool:
        if client_id in registered:
            return False
        registered[client_id] = Client(client_id, secret_digest(secret), role, audiences)
        return True

    with clients_file_errors(path):
        added = change_clients(path, add)
    if not added:
        raise click.ClickException(f"the client {client_id!r} exists; rotate-secret renews it")
    click.echo(f"added the client {client_id!r} ({role}); its secret, shown once:", err=True)
    click.echo(secret)


@clients.command("rotate-secret")
@click.argument("client_id", callback=valid_client_id)
def rotate_secret_command(client_id: str) -> None:
    """Give CLIENT_ID a new secret, print it once; the old one stops working at once, and
    so do the access tokens it was given (within SESSION_CUTOFF_REFRESH on every host)."""
    path = clients_file()
    secret = new_client_secret()

    def rotate(registered: dict[str, Client]) -> bool:
        client = registered.get(client_id)
        if client is None:
            return False
        registered[client_id] = Client(
            client_id, secret_digest(secret), client.role, client.audiences
        )
        return True

    with clients_file_errors(path):
        rotated = change_clients(path, rotate)
    if not rotated:
        raise click.ClickException(f"no client {client_id!r} in {path}")
    done = f"new secret for the client {client_id!r}"
    click.echo(f"{done}; {cut_off_tokens(client_id, done)}; the secret, shown once:", err=True)
    click.echo(secret)


@clients.command("remove")
@click.argument("client_id", callback=valid_client_id)
def remove_client_command(client_id: str) -> None:
    """Remove CLIENT_ID: its secret stops working at once, and so do the access tokens it
    was given (within SESSION_CUTOFF_REFRESH on every host)."""
    path = clients_file()
    with clients_file_errors(path):
        removed = change_clients(
            path, lambda registered: registered.pop(client_id, None) is not None
        )
    if not removed:
        raise click.ClickException(f"no client {client_id!r} in {path}")
    done = f"removed the client {client_id!r}"
    click.echo(f"{done}; {cut_off_tokens(client_id, done)}")


@clients.command("list")
def list_clients_command() -> None:
    """List the clients, one a line: id, role and audiences (never a secret or digest)."""
    path = clients_file()
    with clients_file_errors(path):
        try:
            registered = read_clients_file(path)
        except FileNotFoundError:
            registered = {}
    for client_id in sorted(registered):
        client = registered[client_id]
        click.echo(f"{client_id}\t{client.role}\t{','.join(client.audiences) or '-'}")
    if not registered:
        click.echo(f"no clients in {path}", err=True)
