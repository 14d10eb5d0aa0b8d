"""The one way the service talks to PostgreSQL: a connection pool per process, bounded waits.

The token store (``app.backends.postgres.store``) and the rate limits' counters
(``app.backends.postgres.counters``) share one ``ProcessPool`` (``postgres_backend``):
a psycopg_pool made lazily in each process (so nothing opened before gunicorn forks is
used by a worker), whose every call is bounded by one deadline, ``timeout`` seconds from its start:

- no pool yet (a new process, or the server was found gone): one connection is made in
  the caller's thread first, so a refused connection fails at once, not after a wait;
  the schema is checked (and made, or upgraded) on it, then it becomes the pool's first
  connection;
- a pooled connection whose socket the server closed (a restart, pg_terminate_backend)
  is seen by a poll of its socket, without a round trip, closed and replaced: never
  handed to a call. When none is left, the pool is made anew;
- a new connection the server refuses (stopped, shutting down, a wrong password) while
  a call waits for the pool to connect closes the pool at once: the waiting calls fail
  then, not at their deadline, and the next one connects anew, as above. One that
  times out (a frozen server) is left to the calls' deadlines;
- each call takes a connection from the pool and gives it back at its end;
- the server cancels a statement after ``timeout`` (``statement_timeout``), and a
  watchdog shuts the socket of a call still waiting at its deadline, so a frozen
  server fails the call instead of hanging it;
- a write refused by a read-only server (a standby after a failover) closes its
  connection, so that the next one finds the primary again (``target_session_attrs``).

Nothing is retried: a statement that failed may have committed (its answer was lost).
Every message names the server by ``postgres_location``, never the password.
"""

from __future__ import annotations

import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from app.backends.postgres.process import (
    Connection,
    Process,
    close_pool,
    close_soon,
    handing_over,
    remaining,
)
from app.backends.postgres.sockets import Watchdog, alive

#: What psycopg and psycopg_pool raise when the server cannot answer now (PoolTimeout
#: and PoolClosed are OperationalErrors), and the socket's own OSError.
POSTGRES_FAILURES = (psycopg.Error, OSError)
#: libpq's least connect timeout, in whole seconds.
MIN_CONNECT_TIMEOUT = 2
#: The longest failure message, in characters (a server's hint may go on).
MAX_MESSAGE = 400


def postgres_location(url: str) -> str:
    """Return where ``url`` points, for messages and logs: never its password."""
    params = conninfo_to_dict(url)  # checked by Settings at start-up
    host = params.get("host") or params.get("hostaddr") or "localhost"
    return f"{host}:{params.get('port') or 5432}/{params.get('dbname') or params.get('user')}"


def failure_message(where: str, error: BaseException, password: str = "", why: str = "") -> str:
    """Return one line that says ``where`` failed, ``why`` if given, and the error (its
    class names the cause): never the password."""
    text = " ".join(str(error).split())
    if password:
        text = text.replace(password, "***")
    if len(text) > MAX_MESSAGE:
        text = text[:MAX_MESSAGE] + "..."
    return f"{where}: {why}{': ' if why else ''}{type(error).__name__}: {text}"


@dataclass(frozen=True, eq=False)
class Schema:
    """How a pool's first connection makes the database ready before the pool is used."""

    #: Whether the database is ready as it is: one quick statement, under the timeout.
    ready: Callable[[Connection], bool]
    #: Create or upgrade it (safely beside other processes): may take longer, and run once.
    create: Callable[[Connection], None]


class ProcessPool:
    """A pool of connections to one PostgreSQL database, made lazily in each process.

    ``timeout`` bounds each call (the wait for a connection, then the statement);
    ``connect_timeout`` each new connection (libpq counts whole seconds, at least 2).
    ``schema`` is checked on the first connection of each pool, before the pool is used.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float,
        connect_timeout: float,
        min_size: int,
        max_size: int,
        schema: Schema,
    ) -> None:
        params = conninfo_to_dict(url)
        self.url = url
        self.location = postgres_location(url)
        self.timeout = timeout
        self.min_size = min_size
        self.max_size = max_size
        self._password = str(params.get("password") or "")
        options = f"{params.get('options') or ''} -c statement_timeout={math.ceil(timeout * 1000)}"
        self.conninfo = make_conninfo(
            url,
            options=options.strip(),
            connect_timeout=max(MIN_CONNECT_TIMEOUT, math.ceil(connect_timeout)),
            application_name=params.get("application_name") or "token-service",
        )
        self.schema = schema
        self._current: Process | None = None
        self._lock = threading.Lock()

    def message(self, what: str, error: BaseException, why: str = "") -> str:
        """Return the one line that says ``what`` (at this server) failed: no password."""
        return failure_message(f"{what} {self.location}", error, self._password, why)

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """Yield a live connection of this process's pool, in autocommit, given back at
        the end; bounded by the timeout from now. Raise one of POSTGRES_FAILURES when the
        server cannot answer."""
        deadline = time.monotonic() + self.timeout
        process, connection = self._take(deadline)
        try:
            with process.watchdog.guard(connection, deadline):
                yield connection
        except psycopg.errors.ReadOnlySqlTransaction:
            connection.close()  # a standby now: the next connection may find the primary
            raise
        finally:
            process.pool.putconn(connection)  # a broken one is closed and replaced

    def close(self) -> None:
        """Close this process's pool (made anew on next use); a parent's is left to it."""
        with self._lock:
            current, self._current = self._current, None
        if current is not None:
            close_pool(current)

    def _take(self, deadline: float) -> tuple[Process, Connection]:
        """Return a process's pool and a live connection of it, before ``deadline``."""
        for _ in range(self.max_size + 2):
            process = self._process(deadline)  # the pool another thread made anew, if so
            try:
                connection = process.pool.getconn(remaining(deadline))
            except PoolClosed:
                # another thread found it dead, or its own thread had a connection
                # refused, and closed it meanwhile: the next turn connects anew
                if self._current is process:
                    self._discard(process)
                continue
            except PoolTimeout:
                if process.pool.pop_stats().get("connections_errors"):
                    self._discard(process)  # the server went away: probe it on next use
                raise  # else every connection was busy for the whole timeout
            if alive(connection):
                return process, connection
            connection.close()
            process.pool.putconn(connection)  # closed: the pool replaces it
            if not process.pool.get_stats().get("pool_available"):
                # every idle connection was dead (a restart?): open a new pool, or fail now
                self._discard(process)
        raise PoolTimeout("no live connection in the pool")

    def _process(self, deadline: float) -> Process:
        current = self._current
        if current is not None and current.pid == os.getpid():
            return current
        if not self._lock.acquire(timeout=remaining(deadline)):
            raise PoolTimeout("another thread is still connecting")
        try:
            current = self._current
            if current is not None and current.pid == os.getpid():
                return current
            current = self._open(deadline)  # an inherited pool is left to its process
            current.finalizer = weakref.finalize(self, close_soon, current)
            current.finalizer.atexit = False  # at exit the system closes the sockets
            self._current = current
            return current
        finally:
            self._lock.release()

    def _open(self, deadline: float) -> Process:
        """Connect once, make the database ready on that connection, and start a pool with it."""
        first = psycopg.Connection.connect(self.conninfo, autocommit=True)
        watchdog = Watchdog()
        try:
            with watchdog.guard(first, deadline):
                ready = self.schema.ready(first)
            if not ready:
                self.schema.create(first)  # unbounded: an upgrade of a large table takes time
        except BaseException:
            first.close()
            raise
        handoff = [first]
        made: list[Process] = []
        owner = weakref.ref(self)  # the pool's thread must not keep this object alive

        def refused() -> None:
            this = owner()
            if this is not None and made:
                # its waiting callers get PoolClosed (see _take); a server that refused
                # one connection may still serve the open ones: calls on them finish
                this._discard(made[0])

        pool: ConnectionPool[Connection] = ConnectionPool(
            self.conninfo,
            connection_class=handing_over(handoff, refused),
            kwargs={"autocommit": True},
            min_size=self.min_size,
            max_size=self.max_size,
            open=False,
            timeout=self.timeout,
            num_workers=1,
            name=f"token-service {self.location}",
        )
        process = Process(pool, watchdog, handoff)
        made.append(process)
        pool.open(wait=False)
        return process

    def _discard(self, process: Process) -> None:
        with self._lock:
            if self._current is process:
                self._current = None
        close_soon(process)


#: The pools of this process, one per database and settings (see ``shared_pool``).
_POOLS: dict[tuple[Any, ...], ProcessPool] = {}
_POOLS_LOCK = threading.Lock()


def shared_pool(url: str, **settings: Any) -> ProcessPool:
    """Return the process's one ProcessPool of ``url`` with these settings (ProcessPool's
    keywords), made on first use.

    Every app of a process (and its rate limits) shares it: one pool per worker, however
    many apps a process builds (the tests build thousands, a worker one).
    """
    key = (url, *sorted(settings.items()))  # a Schema is told apart by its identity
    with _POOLS_LOCK:
        if key not in _POOLS:
            _POOLS[key] = ProcessPool(url, **settings)
        return _POOLS[key]
