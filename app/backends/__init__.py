"""Refresh-token stores: pick one by TOKEN_STORE_URL and reach it through the app."""

from __future__ import annotations

from flask import Flask

from app.backends.interface import (
    BackendUnavailable,
    Outcome,
    RefreshTokenPolicy,
    RefreshTokenStore,
    Revocation,
    Rotation,
    TokenRecord,
    shown_digest,
    successor_of,
    token_digest,
)
from app.config.clock import SYSTEM_CLOCK, Clock
from app.config.settings import Settings
from app.config.store_url import parse_store_url
from app.extensions import TOKEN_STORE, clock_of

__all__ = [
    "BackendUnavailable",
    "Outcome",
    "RefreshTokenPolicy",
    "RefreshTokenStore",
    "Revocation",
    "Rotation",
    "TokenRecord",
    "get_store",
    "init_store",
    "open_store",
    "shown_digest",
    "successor_of",
    "token_digest",
]


def open_store(
    url: str,
    timeout: float,
    connect_timeout: float | None = None,
    policy: RefreshTokenPolicy | None = None,
    durability: str = "normal",
    pool_size: tuple[int, int] = (1, 4),
    clock: Clock = SYSTEM_CLOCK,
) -> RefreshTokenStore:
    """Return the store backend that ``url`` names (validated by Settings).

    ``timeout`` bounds each answer (a SQLite lock, a Redis or PostgreSQL reply);
    ``connect_timeout`` each new Redis or PostgreSQL connection, and defaults to
    ``timeout``. ``policy`` (default: SPEC.md's) sets the tokens' lifetime and per-user
    limit. ``durability`` is ``normal`` or ``strict`` (SQLite), or ``relaxed``
    (PostgreSQL); Redis's is its own ``appendfsync``. ``pool_size`` (PostgreSQL) is the
    connections each process keeps and opens at most. ``clock``: the app's.
    """
    location = parse_store_url(url)
    if location.backend == "sqlite":
        from app.backends.sqlite.store import SQLiteTokenStore  # only SQLite hosts load it

        return SQLiteTokenStore(location.path, timeout, policy, durability, clock)
    if location.backend == "postgresql":
        from app.backends.postgres.store import PostgresTokenStore  # only they load psycopg

        return PostgresTokenStore(
            url, timeout, connect_timeout, policy, durability, pool_size, clock
        )
    from app.backends.redis.store import RedisTokenStore  # only Redis hosts load redis-py

    return RedisTokenStore(location.url, timeout, connect_timeout, policy, clock)


def init_store(app: Flask, settings: Settings) -> None:
    """Attach the store named by the settings to ``app``; warn now if a remote one is down.

    Connections open on first use: the one the check opens is closed at once, unless
    the store keeps a pool per process (PostgreSQL), which a forked worker never uses.
    """
    policy = RefreshTokenPolicy(
        lifetime=settings.refresh_token_lifetime,
        per_user=settings.refresh_tokens_per_user,
        reuse_grace=settings.refresh_token_reuse_grace,
    )
    store = open_store(
        settings.token_store_url,
        settings.store_timeout,
        settings.store_connect_timeout,
        policy,
        settings.store_durability,
        (settings.store_pool_min, settings.store_pool_max),
        clock_of(app),
    )
    app.extensions[TOKEN_STORE] = store
    if store.remote:
        _warn_if_unavailable(app, store)


def _warn_if_unavailable(app: Flask, store: RefreshTokenStore) -> None:
    """Log one line if the store does not answer at start; the service starts all the same.

    Each gunicorn worker builds its app, so each says it once; /readyz keeps telling
    the load balancer. The message names the store's place, never a password.
    """
    try:
        store.ping()
    except BackendUnavailable as error:
        app.logger.warning(
            "token store unavailable at start: %s; the requests that need it answer 503"
            " until it answers",
            error,
        )
    finally:
        if not getattr(store, "pooled_per_process", False):
            store.close()  # reopened on first use, in whichever process and thread uses it
