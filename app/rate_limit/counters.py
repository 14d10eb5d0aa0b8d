"""The rate limits' counters: their interface, their failure, and which storage holds them.

``app.rate_limit.sqlite`` and ``app.rate_limit.redis`` implement ``Counters``; the
per-address limits (``app.rate_limit``) and the per-username one
(``app.rate_limit.login_failures``) count on them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol

from app.config import Settings
from app.store_url import parse_store_url

#: The counters' SQLite file, in the token store's folder.
SQLITE_FILE_NAME = "rate_limits.sqlite3"
#: After a storage failure, requests pass unchecked this long before the next try, so a
#: frozen store costs one timeout a second per process, not one per request.
RETRY_AFTER_FAILURE = 1.0
#: At most one log line about storage failures per this many seconds, per process.
FAILURE_LOG_INTERVAL = 60.0


class CountersUnavailableError(Exception):
    """The counters' storage cannot answer; the message names the cause, never a password."""


class Counters(Protocol):
    """Where the windows are counted: ``app.rate_limit.sqlite`` or ``app.rate_limit.redis``."""

    def hit(self, counters: Sequence[tuple[str, int]]) -> list[tuple[int, float]]:
        """Count one hit on each (key, window in seconds); return each one's hits and the
        seconds until its window ends. Raise CountersUnavailableError on any failure."""

    def forgive(self, keys: Sequence[str]) -> None:
        """Take back one hit from each running counter of ``keys`` (LOGIN_FAILURE_LIMIT's
        successful logins). Raise CountersUnavailableError on any failure."""

    def close(self) -> None:
        """Release this process's connections."""


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
