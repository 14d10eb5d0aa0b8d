"""Open the counters' storage: the token store's Redis or PostgreSQL, or a SQLite file beside it."""

from __future__ import annotations

import os

from app.backends.interface import SQLITE_FILE_NAME, Counters, RefreshTokenStore
from app.config.clock import SYSTEM_CLOCK, Clock
from app.config.settings import Settings
from app.config.store_url import parse_store_url


def open_storage(
    settings: Settings, store: RefreshTokenStore | None = None, clock: Clock = SYSTEM_CLOCK
) -> Counters:
    """Return the counters' storage: the token store's Redis or PostgreSQL database, or a
    SQLite file beside it. ``store``: the app's token store, whose PostgreSQL connections
    the counters share (without it, they get a pool of their own). ``clock``: the app's."""
    location = parse_store_url(settings.token_store_url)
    if location.backend == "sqlite":
        from app.backends.sqlite.counters import SQLiteCounters  # only SQLite hosts load it

        folder = os.path.dirname(location.path)
        return SQLiteCounters(os.path.join(folder, SQLITE_FILE_NAME), settings.store_timeout, clock)
    connect_timeout = settings.store_connect_timeout or settings.store_timeout
    if location.backend == "postgresql":
        from app.backends.postgres.counters import PostgresCounters  # only they load psycopg
        from app.backends.postgres.store import PostgresTokenStore

        if not isinstance(store, PostgresTokenStore):
            store = PostgresTokenStore(
                location.url,
                settings.store_timeout,
                connect_timeout,
                pool_size=(settings.store_pool_min, settings.store_pool_max),
            )
        return PostgresCounters(store.client, clock)
    from app.backends.redis.counters import RedisCounters  # only Redis hosts load redis-py

    return RedisCounters(location.url, settings.store_timeout, connect_timeout)
