"""The counters' storage of the rate limits: its interface and its failure.

Apart from the limits themselves, so that the storages (``app.backends.sqlite.counters``,
``app.backends.redis.counters``) import no module that imports them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from limits import RateLimitItem

#: The counters' SQLite file, in the token store's folder.
SQLITE_FILE_NAME = "rate_limits.sqlite3"
#: After a storage failure, requests pass unchecked this long before the next try, so a
#: frozen store costs one timeout a second per process, not one per request.
RETRY_AFTER_FAILURE = 1.0
#: At most one log line about storage failures per this many seconds, per process.
FAILURE_LOG_INTERVAL = 60.0


#: A limit as the counters use it: its amount, its window in seconds, and its keys' end.
Window = tuple[int, int, str]


def windows_of(limits: Sequence[RateLimitItem]) -> list[Window]:
    """Return each limit's amount, window in seconds, and the end of its counters' keys."""
    return [
        (item.amount, item.get_expiry(), f"/{item.amount}/{item.get_expiry()}") for item in limits
    ]


def seconds_until_free(
    windows: Sequence[Window], counted: Sequence[tuple[int, float]]
) -> int | None:
    """Return None if every count is within its limit, else the whole seconds (at least 1)
    until the last window that refused frees."""
    waits = [
        left for (amount, _, _), (hits, left) in zip(windows, counted, strict=True) if hits > amount
    ]
    return max(1, math.ceil(max(waits))) if waits else None


class CountersUnavailableError(Exception):
    """The counters' storage cannot answer; the message names the cause, never a password."""


class Counters(Protocol):
    """Where the windows are counted: each backend's ``counters`` module."""

    def hit(self, counters: Sequence[tuple[str, int]]) -> list[tuple[int, float]]:
        """Count one hit on each (key, window in seconds); return each one's hits and the
        seconds until its window ends. Raise CountersUnavailableError on any failure."""

    def forgive(self, keys: Sequence[str]) -> None:
        """Take back one hit from each running counter of ``keys`` (LOGIN_FAILURE_LIMIT's
        successful logins). Raise CountersUnavailableError on any failure."""

    def close(self) -> None:
        """Release this process's connections."""
