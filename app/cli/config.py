"""``flask config show``: the effective settings, where each came from, secrets masked."""

from __future__ import annotations

from dataclasses import fields

import click
from flask.cli import AppGroup

from app.config.config_file import MASK, mask_url_password
from app.config.settings import IdentityProvider, Settings, is_secret, provider_env_prefix
from app.extensions import current_settings

config = AppGroup("config", help="Show the settings the service runs with (secrets masked).")


@config.command("show")
def show_config_command() -> None:
    """Print each setting: its name, where it came from (environment, file or default) and
    its effective value, every secret masked."""
    _, origins, _ = Settings.gather()
    rows = [
        (name, origins.get(name, "default"), shown(name, text))
        for name, text in effective_settings(current_settings())
    ]
    width = max(len(name) for name, _, _ in rows)
    for name, origin, text in rows:
        click.echo(f"{name:<{width}}  {origin:<11}  {text}".rstrip())


def effective_settings(settings: Settings) -> list[tuple[str, str]]:
    """Return every setting's name and effective value as text, providers' settings included."""
    rows: list[tuple[str, str]] = []
    for setting in fields(settings):
        value = getattr(settings, setting.name)
        rows.append((setting.metadata["env"], as_text(value)))
    for provider in settings.identity_providers:
        prefix = provider_env_prefix(provider.name)
        rows += [
            (prefix + "ISSUER", provider.issuer),
            (prefix + "CLIENT_ID", provider.client_id),
            (prefix + "CLIENT_SECRET", provider.client_secret),
            (prefix + "SCOPES", provider.scopes),
        ]
    return rows


def as_text(value: object) -> str:
    """Return a setting's value as its variable would hold it; "" when unset."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ", ".join(as_text(item) for item in value)
    if isinstance(value, IdentityProvider):
        return value.name
    return str(value)


def shown(name: str, text: str) -> str:
    """Return ``text`` as it may be shown: a secret masked, a store URL's password masked."""
    if name == "TOKEN_STORE_URL":
        return mask_url_password(text)
    if text and is_secret(name, text):
        return MASK
    return text
