"""Open the counters' storage: the token store's Redis, or a SQLite file beside it."""

from __future__ import annotations

import os

from app.config import Settings
from app.rate_limit.counters import SQLITE_FILE_NAME, Counters
from app.store_url import parse_store_url


def open_storage(settings: Settings) -> Counters:
    """Return the counters' storage: the token store's Redis, or a SQLite file beside it."""
    location = parse_store_url(settings.token_store_url)
    if location.backend == "sqlite":
        from app.rate_limit.sqlite import SQLiteCounters  # only SQLite hosts load it

        folder = os.path.dirname(location.path)
        return SQLiteCounters(os.path.join(folder, SQLITE_FILE_NAME), settings.store_timeout)
    from app.rate_limit.redis import RedisCounters  # only Redis hosts load redis-py

    connect_timeout = settings.store_connect_timeout or settings.store_timeout
    return RedisCounters(location.url, settings.store_timeout, connect_timeout)
