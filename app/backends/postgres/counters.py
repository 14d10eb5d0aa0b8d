"""Fixed-window counters in the token store's PostgreSQL: shared by every worker of every host.

One row per counter (endpoint, address, limit) in the UNLOGGED table ``rate_limits``,
which the backend's schema makes (``sql/schema_2.sql``): no WAL is written for a hit,
and a crash of the server empties the table, which only forgives the running windows.
A request's hits on every limit are one multi-row UPSERT, one round trip whatever the
number of limits; rows are locked in key order, so two requests never wait on each
other in a cycle. The
connections are the store's own pool (``app.backends.postgres.client``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from app.backends.interface import BackendUnavailable
from app.backends.postgres.client import POSTGRES_FAILURES, ProcessPool
from app.backends.postgres.process import Connection
from app.config.clock import SYSTEM_CLOCK, Clock

#: Seconds between two purges of ended windows, per process.
PURGE_INTERVAL = 60.0


@functools.cache
def hit_statement(counters: int) -> str:
    """Return the UPSERT of ``counters`` counters: a new window, or one more hit in the
    running one; ``%(now)s`` is now, then each counter's key and end of a new window."""
    rows = ", ".join(f"(%(key{n})s, 1, %(end{n})s)" for n in range(counters))
    return (
        f"INSERT INTO rate_limits AS counter (key, hits, expires_at) VALUES {rows}"  # noqa: S608
        " ON CONFLICT (key) DO UPDATE SET"
        " hits = CASE WHEN counter.expires_at > %(now)s THEN counter.hits + 1 ELSE 1 END,"
        " expires_at = CASE WHEN counter.expires_at > %(now)s THEN counter.expires_at"
        " ELSE excluded.expires_at END"
        " RETURNING key, hits, expires_at"
    )


class PostgresCounters:
    """Fixed-window counters in the PostgreSQL database of ``client`` (the store's pool)."""

    def __init__(self, client: ProcessPool, clock: Clock = SYSTEM_CLOCK) -> None:
        self.client = client
        self.location = client.location
        self._next_purge = 0.0
        #: The app's clock: ``clock()`` is the time the windows start and end by.
        self.clock = clock

    def hit(self, counters: Sequence[tuple[str, int]]) -> list[tuple[int, float]]:
        """Count one hit on each (key, window in seconds); return each one's hits and the
        seconds until its window ends, in the order given."""
        now = self.clock()
        windows = dict(sorted(counters))  # each key once, in key order
        parameters: dict[str, object] = {"now": now}
        for n, (key, window) in enumerate(windows.items()):
            parameters[f"key{n}"], parameters[f"end{n}"] = key, now + window
        with self._answering() as connection:
            rows = connection.execute(hit_statement(len(windows)), parameters).fetchall()
            if now >= self._next_purge:
                self._next_purge = now + PURGE_INTERVAL
                connection.execute("DELETE FROM rate_limits WHERE expires_at <= %s", (now,))
        counted = {key: (int(hits), float(expires_at) - now) for key, hits, expires_at in rows}
        return [counted[key] for key, _ in counters]

    def forgive(self, keys: Sequence[str]) -> None:
        """Take back one hit from each running counter of ``keys`` (none goes below 0)."""
        with self._answering() as connection:
            connection.execute(
                "UPDATE rate_limits SET hits = hits - 1"
                " WHERE key = ANY(%s) AND expires_at > %s AND hits > 0",
                (list(keys), self.clock()),
            )

    def close(self) -> None:
        """Close this process's connections (the store's too: both reopen on next use)."""
        self.client.close()

    @contextmanager
    def _answering(self) -> Iterator[Connection]:
        """Yield a pooled connection; turn every failure into one error."""
        try:
            with self.client.connection() as connection:
                yield connection
        except POSTGRES_FAILURES as error:
            raise BackendUnavailable(self.client.message("PostgreSQL", error)) from error
