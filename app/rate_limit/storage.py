"""Open the counters' storage: the token store's Redis, or a SQLite file beside it."""

from __future__ import annotations

import os

from app.config import Settings
from app.rate_limit.counters import SQLITE_FILE_NAME, Counters


def open_storage(settings: Settings) -> Counters:
    """Return the counters' storage: the token store's Redis, or a SQLite file beside it."""
    url = settings.token_store_url
    if url.startswith("sqlite:///"):
        from app.rate_limit.sqlite import SQLiteCounters

        folder = os.path.dirname(url[len("sqlite:///") :])
        return SQLiteCounters(os.path.join(folder, SQLITE_FILE_NAME), settings.store_timeout)
    from app.rate_limit.redis import RedisCounters

    connect_timeout = settings.store_connect_timeout or settings.store_timeout
    return RedisCounters(url, settings.store_timeout, connect_timeout)
