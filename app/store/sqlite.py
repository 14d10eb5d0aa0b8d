"""Embedded default store: one SQLite file in WAL mode, shared by every worker of a host."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from app.store.base import (
    RefreshTokenStore,
    StoreUnavailableError,
    TokenRecord,
    token_digest,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS refresh_tokens (
    digest    TEXT PRIMARY KEY,
    username  TEXT NOT NULL,
    issued_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS refresh_tokens_by_username ON refresh_tokens (username, issued_at);
"""


class SQLiteTokenStore(RefreshTokenStore):
    """Refresh tokens in one SQLite file, in WAL mode.

    Durability, per operation: a revoke (of one token, a user's, by digest) is
    committed with ``synchronous = FULL``, so the WAL is on disk before the 204 and
    no power cut brings the token back. A login is committed with ``NORMAL``: in WAL
    mode the commit is in the operating system's hands before the 200, so it
    survives the crash or kill of any process, and only a power cut or a kernel
    crash may lose the last moments of logins (whose users log in again); the next
    FULL commit or checkpoint puts them on disk too. ``durability="strict"`` commits
    everything with FULL.

    Connections are opened lazily, one per thread of each process, so that
    nothing opened before gunicorn forks is ever used by a worker.
    """

    def __init__(self, path: str, timeout: float, durability: str = "normal") -> None:
        self.path = path
        self.timeout = timeout
        self.strict = durability == "strict"
        self._local = threading.local()

    def issue(self, token: str, username: str) -> None:
        with self._connection() as connection:
            connection.execute(
                "INSERT INTO refresh_tokens (digest, username, issued_at) VALUES (?, ?, ?)",
                (token_digest(token), username, int(time.time())),
            )

    def owner_of(self, token: str) -> str | None:
        with self._connection() as connection:
            row = connection.execute(
                "SELECT username FROM refresh_tokens WHERE digest = ?", (token_digest(token),)
            ).fetchone()
        return row[0] if row else None

    def revoke(self, token: str) -> bool:
        with self._connection(durable=True) as connection:
            cursor = connection.execute(
                "DELETE FROM refresh_tokens WHERE digest = ?", (token_digest(token),)
            )
        return cursor.rowcount > 0

    def tokens_of(self, username: str) -> list[TokenRecord]:
        with self._connection() as connection:
            rows = connection.execute(
                "SELECT digest, issued_at FROM refresh_tokens WHERE username = ?"
                " ORDER BY issued_at, digest",
                (username,),
            ).fetchall()
        return [TokenRecord.of(digest, username, at) for digest, at in rows]

    def revoke_all(self, username: str) -> int:
        with self._connection(durable=True) as connection:
            cursor = connection.execute(
                "DELETE FROM refresh_tokens WHERE username = ?", (username,)
            )
        return cursor.rowcount

    def _revoke_digest(self, prefix: str) -> int:
        with self._connection(durable=True) as connection:
            connection.execute("BEGIN IMMEDIATE")
            try:
                rows = connection.execute(
                    "SELECT digest FROM refresh_tokens WHERE digest >= ? AND digest < ? LIMIT 2",
                    (prefix, prefix + "g"),
                ).fetchall()
                if len(rows) != 1:
                    connection.execute("ROLLBACK")
                    return 0
                connection.execute("DELETE FROM refresh_tokens WHERE digest = ?", rows[0])
                connection.execute("COMMIT")
            except BaseException:
                connection.execute("ROLLBACK")
                raise
        return 1

    def count(self) -> int:
        with self._connection() as connection:
            return connection.execute("SELECT count(*) FROM refresh_tokens").fetchone()[0]

    def ping(self) -> None:
        with self._connection() as connection:
            connection.execute("SELECT 1").fetchone()

    def close(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None and self._local.pid == os.getpid():
            connection.close()
        self._local.connection = None

    @contextmanager
    def _connection(self, *, durable: bool = False) -> Iterator[sqlite3.Connection]:
        """Yield this thread's connection; ``durable``: commit with ``synchronous = FULL``."""
        try:
            connection = self._open()
            if not durable or self.strict:  # strict connections are FULL throughout
                yield connection
                return
            connection.execute("PRAGMA synchronous = FULL")
            try:
                yield connection
            finally:
                connection.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as error:
            raise StoreUnavailableError(f"SQLite store {self.path}: {error}") from error

    def _open(self) -> sqlite3.Connection:
        connection = getattr(self._local, "connection", None)
        if connection is not None and self._local.pid == os.getpid():
            return connection
        # autocommit mode: each statement is its own transaction unless BEGIN is issued
        connection = sqlite3.connect(
            self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
        )
        try:
            self._prepare(connection)
        except BaseException:
            connection.close()
            raise
        self._local.connection, self._local.pid = connection, os.getpid()
        return connection

    def _prepare(self, connection: sqlite3.Connection) -> None:
        connection.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
        # NORMAL (in WAL mode): commits survive any process crash; revokes switch to FULL.
        connection.execute(f"PRAGMA synchronous = {'FULL' if self.strict else 'NORMAL'}")
        # Switching to WAL takes a lock that busy_timeout does not wait for, so
        # workers opening a new file together retry until the first one is done.
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
                os.chmod(path, 0o600)  # tokens are digests, but usernames are personal data
