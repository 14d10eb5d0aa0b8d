"""Fixed-window counters in one SQLite file: the rate limits' storage on a SQLite host.

``limits`` ships storages for Redis, Memcached, MongoDB and process memory, none of
which every worker of a host shares without another server; this is the smallest
one that does. One row per key (endpoint, address, limit): a hit is one UPSERT,
atomic under SQLite's write lock, so N allowed per window means at most N answered,
whichever worker counts them. The file is its own, beside the token store's: it
takes the write lock of its own file, and it is written with ``synchronous = OFF``
(WAL mode: a crash of a process loses nothing; a power cut may lose the last
counts, which only forgives a few requests).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time

from limits.storage import Storage

SCHEMA = """
CREATE TABLE IF NOT EXISTS rate_limits (
    key        TEXT PRIMARY KEY,
    hits       INTEGER NOT NULL,
    expires_at REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS rate_limits_by_expiry ON rate_limits (expires_at);
"""
#: One statement: a new window, or one more hit in the running one; the count after it.
#: The SET expressions all read the row as it was before the statement.
HIT = """
INSERT INTO rate_limits (key, hits, expires_at) VALUES (:key, :amount, :expires_at)
ON CONFLICT (key) DO UPDATE SET
    hits = CASE WHEN expires_at > :now THEN hits + excluded.hits ELSE excluded.hits END,
    expires_at = CASE WHEN expires_at > :now THEN expires_at ELSE excluded.expires_at END
RETURNING hits
"""
#: Seconds between two purges of ended windows, per process (through the expiry index).
PURGE_INTERVAL = 60.0


class SQLiteStorage(Storage):
    """A ``limits`` storage for the fixed-window strategy, in the SQLite file at ``path``.

    Connections open lazily, one per thread of each process, so nothing opened
    before gunicorn forks is used by a worker.
    """

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__(wrap_exceptions=True)  # every failure is a limits StorageError
        self.path = path
        self.timeout = timeout
        self._local = threading.local()
        self._next_purge = 0.0

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return sqlite3.Error

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        """Count ``amount`` hits in the key's window (a new one of ``expiry`` s if it ended)."""
        now = time.time()
        connection = self._open()
        # fetchall: a RETURNING statement commits when its last row is read
        rows = connection.execute(
            HIT, {"key": key, "amount": amount, "expires_at": now + expiry, "now": now}
        ).fetchall()
        if now >= self._next_purge:
            self._next_purge = now + PURGE_INTERVAL
            connection.execute("DELETE FROM rate_limits WHERE expires_at <= ?", (now,))
        return int(rows[0][0])

    def get(self, key: str) -> int:
        row = (
            self._open()
            .execute(
                "SELECT hits FROM rate_limits WHERE key = ? AND expires_at > ?", (key, time.time())
            )
            .fetchone()
        )
        return int(row[0]) if row else 0

    def get_expiry(self, key: str) -> float:
        now = time.time()
        row = (
            self._open()
            .execute(
                "SELECT expires_at FROM rate_limits WHERE key = ? AND expires_at > ?", (key, now)
            )
            .fetchone()
        )
        return float(row[0]) if row else now

    def check(self) -> bool:
        try:
            self._open().execute("SELECT 1").fetchone()
        except sqlite3.Error:
            return False
        return True

    def reset(self) -> int | None:
        return self._open().execute("DELETE FROM rate_limits").rowcount

    def clear(self, key: str) -> None:
        self._open().execute("DELETE FROM rate_limits WHERE key = ?", (key,))

    def close(self) -> None:
        """Close this thread's connection (reopened on next use)."""
        connection = getattr(self._local, "connection", None)
        if connection is not None and self._local.pid == os.getpid():
            connection.close()
        self._local.connection = None

    def _open(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is not None and self._local.pid == os.getpid():
            return connection
        connection = sqlite3.connect(
            self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
        )
        try:
            connection.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            connection.execute("PRAGMA synchronous = OFF")
            # Switching to WAL takes a lock busy_timeout does not wait for: retry a moment.
            deadline = time.monotonic() + self.timeout
            while True:
                try:
                    connection.execute("PRAGMA journal_mode = WAL")
                    connection.executescript(SCHEMA)
                    break
                except sqlite3.OperationalError:
                    if time.monotonic() >= deadline:
                        raise
                    time.sleep(0.01)
            for path in (self.path, self.path + "-wal", self.path + "-shm"):
                if os.path.exists(path):
                    os.chmod(path, 0o600)  # client addresses are personal data
        except BaseException:
            connection.close()
            raise
        self._local.connection, self._local.pid = connection, os.getpid()
        return connection
