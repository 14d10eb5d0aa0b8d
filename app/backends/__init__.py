"""The backends: one per TOKEN_STORE_URL, holding both the refresh-token store and the rate
limits' counters on the same connections (``open_backend``), and its place in the app."""

from __future__ import annotations

from flask import Flask

from app.backends.interface import (
    Backend,
    BackendUnavailable,
    RefreshTokenPolicy,
    RefreshTokenStore,
)
from app.config.clock import SYSTEM_CLOCK, Clock
from app.config.settings import Settings
from app.config.store_url import parse_store_url
from app.extensions import BACKEND, TOKEN_STORE, clock_of


def open_backend(settings: Settings, clock: Clock = SYSTEM_CLOCK) -> Backend:
    """Return the backend TOKEN_STORE_URL names, set up as the settings say, on ``clock``."""
    return backend_at(
        settings.token_store_url,
        settings.store_timeout,
        settings.store_connect_timeout,
        RefreshTokenPolicy(
            lifetime=settings.refresh_token_lifetime,
            per_user=settings.refresh_tokens_per_user,
            reuse_grace=settings.refresh_token_reuse_grace,
            idle_timeout=settings.refresh_token_idle_timeout,
        ),
        settings.store_durability,
        (settings.store_pool_min, settings.store_pool_max),
        clock,
    )


def backend_at(
    url: str,
    timeout: float,
    connect_timeout: float | None = None,
    policy: RefreshTokenPolicy | None = None,
    durability: str = "normal",
    pool_size: tuple[int, int] = (1, 4),
    clock: Clock = SYSTEM_CLOCK,
) -> Backend:
    """Return the backend that ``url`` names (validated by Settings): the one place a URL
    picks a backend.

    ``timeout`` bounds each answer (a SQLite lock, a Redis or PostgreSQL reply);
    ``connect_timeout`` each new Redis or PostgreSQL connection, and defaults to
    ``timeout``. ``policy`` (default: SPEC.md's) sets the tokens' lifetime and per-user
    limit. ``durability`` is ``normal`` or ``strict`` (SQLite), or ``relaxed``
    (PostgreSQL); Redis's is its own ``appendfsync``. ``pool_size`` (PostgreSQL) is the
    connections each process keeps and opens at most. ``clock``: the app's.
    """
    location = parse_store_url(url)
    connect_timeout = timeout if connect_timeout is None else connect_timeout
    if location.backend == "sqlite":
        from app.backends.sqlite import sqlite_backend  # only SQLite hosts load it

        return sqlite_backend(location.path, timeout, policy, durability, clock)
    if location.backend == "postgresql":
        from app.backends.postgres import postgres_backend  # only they load psycopg

        return postgres_backend(url, timeout, connect_timeout, policy, durability, pool_size, clock)
    from app.backends.redis import redis_backend  # only Redis hosts load redis-py

    return redis_backend(location.url, timeout, connect_timeout, policy, clock)


def init_store(app: Flask, settings: Settings) -> None:
    """Attach the backend named by the settings to ``app``, and its store; warn now if a
    remote one is down.

    Connections open on first use: the one the check opens is closed at once, unless
    the store keeps a pool per process (PostgreSQL), which a forked worker never uses.
    """
    backend = open_backend(settings, clock_of(app))
    app.extensions[BACKEND] = backend
    app.extensions[TOKEN_STORE] = backend.store
    if backend.store.remote:
        _warn_if_unavailable(app, backend.store)


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
