"""TOKEN_STORE_URL: which backend a store URL names, and where it lives.

Imports nothing of the app, so that the settings, the token store and the rate
limits' storage all read a URL the same way.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

#: A SQLite file: ``sqlite:///`` then its path, so an absolute path shows four slashes
#: (``sqlite:////var/lib/token-service/tokens.sqlite3``) and a relative one three.
SQLITE_PREFIX = "sqlite:///"
REDIS_PREFIXES = ("redis://", "rediss://", "unix://")
POSTGRES_PREFIXES = ("postgresql://", "postgres://")

Backend = Literal["sqlite", "redis", "postgresql"]

#: libpq's connection parameters that take one of a few words, each word as libpq spells
#: it (it compares them case-sensitively): any other value fails every connection, so it is
#: refused at start instead of answering 503 for ever.
POSTGRES_CHOICES: dict[str, tuple[str, ...]] = {
    "sslmode": ("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
    "gssencmode": ("disable", "prefer", "require"),
    "channel_binding": ("disable", "prefer", "require"),
    "target_session_attrs": (
        "any", "read-write", "read-only", "primary", "standby", "prefer-standby",
    ),
    "load_balance_hosts": ("disable", "random"),
    "sslcertmode": ("disable", "allow", "require"),
    "sslnegotiation": ("postgres", "direct"),
}  # fmt: skip


@dataclass(frozen=True)
class StoreLocation:
    """A parsed TOKEN_STORE_URL: the backend, and its file (SQLite) or its URL (the others)."""

    backend: Backend
    #: The SQLite file's path as given (relative to the working folder, or absolute);
    #: "" for the others.
    path: str
    #: The URL as given.
    url: str


def parse_store_url(url: str) -> StoreLocation:
    """Return the backend and place ``url`` names; raise ValueError in one line otherwise."""
    if url.startswith(SQLITE_PREFIX):
        return StoreLocation("sqlite", url[len(SQLITE_PREFIX) :], url)
    if url.startswith(REDIS_PREFIXES):
        return StoreLocation("redis", "", url)
    if url.startswith(POSTGRES_PREFIXES):
        return StoreLocation("postgresql", "", url)
    raise ValueError(
        "TOKEN_STORE_URL must start with sqlite:///, redis://, rediss://, unix://,"
        " postgresql:// or postgres://"
    )


def postgres_url_problem(parameters: Mapping[str, object]) -> str | None:
    """Return why a PostgreSQL URL, as libpq parsed it into ``parameters``, can never
    connect (the end of a sentence about the URL), or None.

    A server that is only down is no such problem: the service starts, and answers 503
    until the server is back.
    """
    for name, choices in POSTGRES_CHOICES.items():
        value = parameters.get(name)
        if value is not None and value not in choices:
            shown = str(value)[:40]
            return f"has {name}={shown!r}, which must be one of {', '.join(choices)}"
    negotiation, mode = parameters.get("sslnegotiation"), parameters.get("sslmode")
    if negotiation == "direct" and mode not in {"require", "verify-ca", "verify-full"}:
        return "has sslnegotiation=direct, which needs sslmode=require, verify-ca or verify-full"
    # libpq would take the database's name from the user's, else from the account the
    # service runs as, which is no database of the service's; unless a connection service
    # file or libpq's own variables (read from this process's environment) name them
    named_elsewhere = parameters.get("service") or any(
        os.environ.get(name) for name in ("PGDATABASE", "PGUSER", "PGSERVICE")
    )
    if not parameters.get("dbname") and not parameters.get("user") and not named_elsewhere:
        return (
            "names no database: put its name after the host and port"
            " (postgresql://token_service@db.internal:5432/token_service)"
        )
    return None


def relative_path_hint(path: str) -> str:
    """Return the hint to add when a SQLite ``path`` is relative, or "" when it is absolute.

    ``sqlite:///var/lib/tokens.sqlite3`` names ``var/lib/tokens.sqlite3`` in the working
    folder: an absolute path needs a fourth slash, easily missed.
    """
    if path.startswith("/"):
        return ""
    return (
        f" (sqlite:///{path} is a path relative to the working folder; an absolute"
        f" path has four slashes: sqlite:////{path})"
    )


def sqlite_url(path: str) -> str:
    """Return the TOKEN_STORE_URL of the SQLite file at ``path``."""
    return SQLITE_PREFIX + path
