"""``flask keys ...``: make a signing key file, show the key ring (by kid, never in clear)."""

from __future__ import annotations

import click
from flask.cli import AppGroup

from app.auth.key_files import create_private_file, new_private_key_pem
from app.auth.keys import private_key_file
from app.config.settings import EDDSA, ES256, HS256
from app.extensions import current_settings, get_key_ring

keys = AppGroup("keys", help="Make and show signing keys (shown by kid, never in clear).")


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
