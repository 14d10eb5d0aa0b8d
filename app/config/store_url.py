"""TOKEN_STORE_URL: which backend a store URL names, and where it lives.

Imports nothing of the app, so that the settings, the token store and the rate
limits' storage all read a URL the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: A SQLite file: ``sqlite:///`` then its path, so an absolute path shows four slashes
#: (``sqlite:////var/lib/token-service/tokens.sqlite3``) and a relative one three.
SQLITE_PREFIX = "sqlite:///"
REDIS_PREFIXES = ("redis://", "rediss://", "unix://")
POSTGRES_PREFIXES = ("postgresql://", "postgres://")

Backend = Literal["sqlite", "redis", "postgresql"]


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


def sqlite_url(path: str) -> str:
    """Return the TOKEN_STORE_URL of the SQLite file at ``path``."""
    return SQLITE_PREFIX + path
