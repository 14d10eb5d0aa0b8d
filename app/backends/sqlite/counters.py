"""Fixed-window counters in one SQLite file: the rate limits' storage on a SQLite host.

``limits`` ships storages for Redis, Memcached, MongoDB and process memory, none of
which every worker of a host shares without another server; this is the smallest
one that does. One row per counter (endpoint, address, limit): a request's hits on
every limit are one multi-row UPSERT, atomic under SQLite's write lock, so N allowed
per window means at most N answered, whichever worker counts them. The file is its
own, beside the token store's, so it never waits for the store's write lock, and it
is written with ``synchronous = OFF`` (WAL mode: a crash of a process loses nothing;
a power cut may lose the last counts, which only forgives a few requests).
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from app.backends.interface import BackendUnavailable
from app.backends.sqlite.files import ProcessWriter, connect_wal, error_text
from app.backends.sqlite.tables import migrate
from app.config.clock import SYSTEM_CLOCK, Clock


def _version_1(connection: sqlite3.Connection) -> None:
    connection.execute(
        "CREATE TABLE IF NOT EXISTS rate_limits"
        " (key TEXT PRIMARY KEY, hits INTEGER NOT NULL, expires_at REAL NOT NULL) WITHOUT ROWID"
    )
    connection.execute(
        "CREATE INDEX IF NOT EXISTS rate_limits_by_expiry ON rate_limits (expires_at)"
    )


#: The counters file's steps, one per version (``PRAGMA user_version``), as the store's.
STEPS: tuple[Callable[[sqlite3.Connection], None], ...] = (_version_1,)
#: Seconds between two purges of ended windows, per process (through the expiry index).
PURGE_INTERVAL = 60.0
#: The counters' file, in the token store's folder.
COUNTERS_FILE_NAME = "rate_limits.sqlite3"


@functools.cache
def hit_statement(counters: int) -> str:
    """Return the UPSERT of ``counters`` counters: a new window, or one more hit in the
    running one; ``?1`` is now, then each counter's key and end of a new window. The SET
    expressions all read a row as it was before the statement."""
    rows = ", ".join(f"(?{2 * n + 2}, 1, ?{2 * n + 3})" for n in range(counters))
    return (
        f"INSERT INTO rate_limits (key, hits, expires_at) VALUES {rows}"  # noqa: S608 (numbered ?s)
        " ON CONFLICT (key) DO UPDATE SET"
        " hits = CASE WHEN expires_at > ?1 THEN hits + 1 ELSE 1 END,"
        " expires_at = CASE WHEN expires_at > ?1 THEN expires_at ELSE excluded.expires_at END"
        " RETURNING key, hits, expires_at"
    )


class SQLiteCounters:
    """Fixed-window counters in the SQLite file at ``path``.

    Every hit is a write: one connection per process, opened lazily (so nothing
    opened before gunicorn forks is used by a worker), which its threads take in
    turn (app/backends/sqlite/files.py).
    """

    def __init__(self, path: str, timeout: float, clock: Clock = SYSTEM_CLOCK) -> None:
        self.path = path
        self.timeout = timeout
        self._writer = ProcessWriter(self._connect, timeout)
        self._next_purge = 0.0
        #: The app's clock: ``clock()`` is the time the windows start and end by.
        self.clock = clock

    def hit(self, counters: Sequence[tuple[str, int]]) -> list[tuple[int, float]]:
        """Count one hit on each (key, window in seconds); return each one's hits and the
        seconds until its window ends, in the order given."""
        now = self.clock()
        parameters: list[object] = [now]
        for key, window in counters:
            parameters += [key, now + window]
        with self._answering() as connection:
            # fetchall: a RETURNING statement commits when its last row is read
            rows = connection.execute(hit_statement(len(counters)), parameters).fetchall()
            if now >= self._next_purge:
                self._next_purge = now + PURGE_INTERVAL
                connection.execute("DELETE FROM rate_limits WHERE expires_at <= ?", (now,))
        counted = {key: (int(hits), float(expires_at) - now) for key, hits, expires_at in rows}
        return [counted[key] for key, _ in counters]

    def forgive(self, keys: Sequence[str]) -> None:
        """Take back one hit from each running counter of ``keys`` (none goes below 0)."""
        marks = ", ".join("?" * len(keys))
        with self._answering() as connection:
            connection.execute(
                "UPDATE rate_limits SET hits = hits - 1"  # noqa: S608 (only ?s are added)
                f" WHERE key IN ({marks}) AND expires_at > ? AND hits > 0",
                [*keys, self.clock()],
            )

    def close(self) -> None:
        """Close this process's connection (reopened on next use)."""
        self._writer.close()

    @contextmanager
    def _answering(self) -> Iterator[sqlite3.Connection]:
        """Yield the process's connection; turn every failure into one error."""
        try:
            with self._writer.connection() as connection:
                yield connection
        except (sqlite3.Error, OSError) as error:
            raise BackendUnavailable(
                f"SQLite {self.path}: {type(error).__name__}: {error_text(error)}"
            ) from error

    def _connect(self) -> sqlite3.Connection:
        # OFF: a crash of a process loses nothing in WAL mode; a power cut, a few counts
        return connect_wal(self.path, self.timeout, "OFF", functools.partial(migrate, steps=STEPS))
