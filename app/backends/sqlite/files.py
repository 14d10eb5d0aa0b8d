"""The service's SQLite files (the token store, the rate limits' counters): how they open.

Both are shared by every worker of a host, so both open the same way: autocommit,
WAL, a busy timeout, private file modes. Reads use one connection per thread of each
process; writes use one connection per process, which its threads take in turn.
Every connection opens lazily, so nothing opened before gunicorn forks is used by a
worker.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def connect_wal(
    path: str, timeout: float, synchronous: str, prepare: Callable[[sqlite3.Connection], None]
) -> sqlite3.Connection:
    """Open ``path`` in autocommit and WAL mode, run ``prepare`` (the schema), keep it 0600."""
    create_private_file(path)
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
                os.chmod(name, 0o600)  # a file an older version created 0644
    except BaseException:
        connection.close()
        raise
    return connection


def error_text(error: BaseException) -> str:
    """Return what SQLite said, with its result code's name where it has one: a full disk
    is ``database or disk is full (SQLITE_FULL)``."""
    name = getattr(error, "sqlite_errorname", None)  # only on errors SQLite itself returned
    return f"{error} ({name})" if name else str(error)


def create_private_file(path: str) -> None:
    """Create ``path`` empty, mode 0600 whatever the umask, unless it exists already.

    Usernames and client addresses are personal data. SQLite would create the file
    0644 (less the umask), to be chmod-ed only afterwards; an empty file is a new
    database to it. It creates the -wal and -shm files with the main file's mode,
    and sets that mode on them even under a umask that would widen or narrow it.
    """
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    try:
        os.fchmod(descriptor, 0o600)  # a umask such as 0o277 takes bits from os.open's mode
    finally:
        os.close(descriptor)


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


class ProcessWriter:
    """One connection per process for writes, which the process's threads take in turn.

    SQLite lets one writer into a file at a time and makes the others poll: a writer
    that finds the file locked sleeps 1 ms, then 2, then 5... (its busy handler). Threads
    that each wrote on a connection of their own would meet there at every burst of
    writes; here they queue on a lock instead, each going in as soon as the one before
    is done, which costs less CPU than polling. Workers of
    other processes still meet in SQLite's busy handler, far less often.
    """

    def __init__(self, connect: Callable[[], sqlite3.Connection], timeout: float) -> None:
        self._connect = connect
        self.timeout = timeout
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None
        self._pid = 0
        # a child forked while a thread of its parent held the lock gets a free one
        os.register_at_fork(after_in_child=functools.partial(_new_lock, weakref.ref(self)))

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """Yield the process's write connection, held by this thread alone until the end."""
        self._acquire()
        try:
            yield self._get()
        finally:
            self._lock.release()

    def _acquire(self) -> None:
        if not self._lock.acquire(timeout=self.timeout):
            # what SQLite says when its own busy timeout runs out
            raise sqlite3.OperationalError("database is locked")

    def _get(self) -> sqlite3.Connection:
        if self._connection is None or self._pid != os.getpid():  # never a parent's
            self._connection = self._connect()
            self._pid = os.getpid()
        return self._connection

    def close(self) -> None:
        """Close this process's write connection (reopened on next use)."""
        with self._lock:
            if self._connection is not None and self._pid == os.getpid():
                self._connection.close()
            self._connection = None


def _new_lock(writer: weakref.ref[ProcessWriter]) -> None:
    found = writer()
    if found is not None:
        found._lock = threading.Lock()
