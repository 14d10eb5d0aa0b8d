"""The counters' storage of the rate limits: its interface and its failure.

Apart from the limits themselves, so that the storages (``app.rate_limit.sqlite``,
``app.rate_limit.redis``) import no module that imports them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

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
