"""The service's SQLite files (the token store, the rate limits' counters): how they open.

Both are shared by every worker of a host, so both open the same way: autocommit,
WAL, a busy timeout, private file modes, and one connection per thread of each
process, opened lazily, so that nothing opened before gunicorn forks is used by a
worker.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable


def connect_wal(
    path: str, timeout: float, synchronous: str, prepare: Callable[[sqlite3.Connection], None]
) -> sqlite3.Connection:
    """Open ``path`` in autocommit and WAL mode, run ``prepare`` (the schema), keep it 0600."""
    # autocommit: each statement is its own transaction unless BEGIN is issued
    connection = sqlite3.connect(
        path, timeout=timeout, isolation_level=None, check_same_thread=False
    )
    try:
        connection.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        connection.execute(f"PRAGMA synchronous = {synchronous}")
        # Switching to WAL takes a lock that busy_timeout does not wait for, so
        # workers opening a new file together retry until the first one is done.
        deadline = time.monotonic() + timeout
        while True:
            try:
                connection.execute("PRAGMA journal_mode = WAL")
                prepare(connection)
                break
            except sqlite3.OperationalError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)
        for name in (path, path + "-wal", path + "-shm"):
            if os.path.exists(name):
                os.chmod(name, 0o600)  # usernames and client addresses are personal data
    except BaseException:
        connection.close()
        raise
    return connection


class ThreadConnections:
    """One connection per thread of each process, made by ``connect`` on first use."""

    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        self._connect = connect
        self._local = threading.local()

    def get(self) -> sqlite3.Connection:
        """Return this thread's connection, opening it if this process has none yet."""
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is not None and self._local.pid == os.getpid():
            return connection
        connection = self._connect()
        self._local.connection, self._local.pid = connection, os.getpid()
        return connection

    def close(self) -> None:
        """Close this thread's connection (reopened on next use); a parent's is left alone."""
        connection = getattr(self._local, "connection", None)
        if connection is not None and self._local.pid == os.getpid():
            connection.close()
        self._local.connection = None
