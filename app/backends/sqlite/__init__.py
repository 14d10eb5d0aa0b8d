"""The SQLite backend: the store's file, and the counters' file beside it (one host)."""

from __future__ import annotations

import os

from app.backends.interface import SQLITE_FILE_NAME, Backend, RefreshTokenPolicy
from app.backends.sqlite.counters import SQLiteCounters
from app.backends.sqlite.store import SQLiteTokenStore


def sqlite_backend(
    path: str, timeout: float, policy: RefreshTokenPolicy | None, durability: str
) -> Backend:
    """Return the store in the file at ``path`` and the counters in a file beside it: each
    file its own, so that a hit never waits for the store's write lock."""
    counters = SQLiteCounters(os.path.join(os.path.dirname(path), SQLITE_FILE_NAME), timeout)
    return Backend(SQLiteTokenStore(path, timeout, policy, durability), counters)
