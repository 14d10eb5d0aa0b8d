"""One process's PostgreSQL pool (``app.backends.postgres.client``): its watchdog, its
first connection handed over, and how it is closed (never a parent's)."""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from app.backends.postgres.sockets import Watchdog

Connection = psycopg.Connection[Any]


@dataclass(eq=False)
class Process:
    """One process's pool, its watchdog, and the pool's first connection until taken."""

    pool: ConnectionPool[Connection]
    watchdog: Watchdog
    handoff: list[Connection]
    pid: int = field(default_factory=os.getpid)
    #: Closes the pool if its ProcessPool is dropped unclosed (an app left to the collector).
    finalizer: weakref.finalize[Any, Any] | None = None


def handing_over(handoff: list[Connection], refused: Callable[[], None]) -> type[Connection]:
    """Return a connection class whose first ``connect`` hands over the pool's first
    connection (made, and prepared, by the caller) instead of making another, and which
    calls ``refused`` when the server refuses a new connection.

    The pool connects in its own thread and keeps trying, so a caller waiting for a
    connection would wait its whole timeout for a server that said no at once: a refused
    connection (nothing listening, the server shutting down, a wrong password) is known
    then, and ``refused`` fails the waiting callers. A connection that timed out (a
    frozen server) is left to the callers' own deadlines.
    """

    class HandedOver(psycopg.Connection[Any]):
        @classmethod
        def connect(cls, conninfo: str = "", **kwargs: Any) -> Any:
            try:
                return handoff.pop()
            except IndexError:
                pass
            try:
                return psycopg.Connection.connect(conninfo, **kwargs)
            except psycopg.errors.ConnectionTimeout:
                raise
            except psycopg.OperationalError:
                refused()
                raise

    return HandedOver


def close_pool(process: Process) -> None:
    """Close a pool of this process, its connections and its watchdog; never a parent's,
    whose sockets the parent still uses. A call running on a connection taken from it
    finishes: the connection is closed when given back to the closed pool."""
    if process.pid != os.getpid():
        return
    if process.finalizer is not None:
        process.finalizer.detach()
    process.watchdog.stop()
    process.pool.close()
    for connection in process.handoff:  # never taken: the pool closed first
        connection.close()


def close_soon(process: Process) -> None:
    """Close a pool in a thread of its own: never in one of its workers, which the
    collector may be running in, and which cannot wait for itself."""
    if process.finalizer is not None:
        process.finalizer.detach()
    if process.pid == os.getpid():
        threading.Thread(target=close_pool, args=(process,), daemon=True).start()


def remaining(deadline: float) -> float:
    """Return the seconds left before ``deadline``: at least a millisecond, since
    psycopg_pool refuses a wait of 0 even when a connection is ready."""
    return max(0.001, deadline - time.monotonic())
