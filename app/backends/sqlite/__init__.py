"""The SQLite backend: the store's file, and the counters' file beside it (one host)."""

from __future__ import annotations

import os

from app.backends.interface import Backend, RefreshTokenPolicy
from app.backends.sqlite.counters import COUNTERS_FILE_NAME, SQLiteCounters
from app.backends.sqlite.store import SQLiteTokenStore
from app.config.clock import Clock


def sqlite_backend(
    path: str, timeout: float, policy: RefreshTokenPolicy | None, durability: str, clock: Clock
) -> Backend:
    """Return the store in the file at ``path`` and the counters in a file beside it: each
    file its own, so that a hit never waits for the store's write lock."""
    counters_file = os.path.join(os.path.dirname(path), COUNTERS_FILE_NAME)
    counters = SQLiteCounters(counters_file, timeout, clock)
    return Backend(SQLiteTokenStore(path, timeout, policy, durability, clock), counters)
