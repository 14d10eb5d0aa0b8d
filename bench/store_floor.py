"""The store matrix's floor: one write or one read on a store, and nothing else.

bench/floor_app.py calls ``write`` in its ``POST /login`` and ``read`` in its
``POST /token`` when ``FLOOR_STORE_URL`` names a store. Each is what a plain app does
with that store's usual client, the least a login or a refresh can do there:

- SQLite: one ``INSERT`` of a new row (digest, username, time), one ``SELECT`` of a
  row by its digest; WAL, ``synchronous = NORMAL`` (the service's setting for a
  login), one write connection per process taken in turn under a lock, one read
  connection per thread;
- Redis: one ``SET``, one ``GET``, through redis-py with the service's client options
  (text replies, RESP2, no retry);
- PostgreSQL: one ``INSERT``, one ``SELECT`` in autocommit (each a committed
  transaction), through psycopg 3, one connection per thread.

Connections open on first use, after gunicorn forks. ``prepare`` (run once, by the
bench, before the floor starts) makes the table and the one row that ``read`` finds.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import threading
import time
from typing import Any

KEY_PREFIX = "floor:token:"
USERNAME = "bench"
TIMEOUT = 5.0


def open_floor_store(url: str, known_digest: str) -> Any:
    """Return the floor's store for ``url``: an object with ``write()`` and ``read()``."""
    if url.startswith("sqlite:///"):
        return SQLiteFloor(url.removeprefix("sqlite:///"), known_digest)
    if url.startswith(("redis://", "rediss://")):
        return RedisFloor(url, known_digest)
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresFloor(url, known_digest)
    raise ValueError(f"no floor store for {url.split(':', 1)[0]}")


def prepare(url: str, known_digest: str) -> None:
    """Create the floor's table (SQLite, PostgreSQL) and the row ``read`` looks up."""
    store = open_floor_store(url, known_digest)
    store.prepare()
    store.close()


class SQLiteFloor:
    """One INSERT, one SELECT by primary key, in a WAL file of the floor's own."""

    def __init__(self, path: str, known_digest: str) -> None:
        self.path = path
        self.known_digest = known_digest
        self._local = threading.local()
        self._lock = threading.Lock()
        self._writer: sqlite3.Connection | None = None
        self._writer_pid = 0

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(
            self.path, timeout=TIMEOUT, isolation_level=None, check_same_thread=False
        )
        connection.execute(f"PRAGMA busy_timeout = {int(TIMEOUT * 1000)}")
        connection.execute("PRAGMA synchronous = NORMAL")
        connection.execute("PRAGMA journal_mode = WAL")
        return connection

    def prepare(self) -> None:
        connection = self._connect()
        connection.execute(
            "CREATE TABLE IF NOT EXISTS floor_tokens (digest TEXT PRIMARY KEY,"
            " username TEXT NOT NULL, issued_at INTEGER NOT NULL) WITHOUT ROWID"
        )
        connection.execute(
            "INSERT OR IGNORE INTO floor_tokens VALUES (?, ?, ?)",
            (self.known_digest, USERNAME, int(time.time())),
        )
        connection.close()

    def write(self) -> None:
        with self._lock:
            if self._writer is None or self._writer_pid != os.getpid():
                self._writer, self._writer_pid = self._connect(), os.getpid()
            self._writer.execute(
                "INSERT INTO floor_tokens (digest, username, issued_at) VALUES (?, ?, ?)",
                (secrets.token_hex(32), USERNAME, int(time.time())),
            )

    def read(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = self._connect()
        row = connection.execute(
            "SELECT username FROM floor_tokens WHERE digest = ?", (self.known_digest,)
        ).fetchone()
        assert row is not None

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


class RedisFloor:
    """One SET of a new key, one GET of a known key, on the service's Redis."""

    def __init__(self, url: str, known_digest: str) -> None:
        self.url = url
        self.known_key = KEY_PREFIX + known_digest
        self._client: Any = None
        self._pid = 0

    def _get(self) -> Any:
        if self._client is None or self._pid != os.getpid():
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry

            self._client = redis.Redis.from_url(
                self.url, decode_responses=True, socket_timeout=TIMEOUT,
                socket_connect_timeout=TIMEOUT, retry=Retry(NoBackoff(), 0), protocol=2,
            )  # fmt: skip
            self._pid = os.getpid()
        return self._client

    def prepare(self) -> None:
        self._get().set(self.known_key, USERNAME)

    def write(self) -> None:
        self._get().set(KEY_PREFIX + secrets.token_hex(32), USERNAME)

    def read(self) -> None:
        assert self._get().get(self.known_key) is not None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


class PostgresFloor:
    """One INSERT, one SELECT by primary key, each committed on its own (autocommit)."""

    def __init__(self, url: str, known_digest: str) -> None:
        self.url = url
        self.known_digest = known_digest
        self._local = threading.local()

    def _get(self) -> Any:
        connection = getattr(self._local, "connection", None)
        if connection is None or self._local.pid != os.getpid():
            import psycopg

            connection = psycopg.connect(self.url, autocommit=True, connect_timeout=TIMEOUT)
            self._local.connection, self._local.pid = connection, os.getpid()
        return connection

    def prepare(self) -> None:
        connection = self._get()
        connection.execute(
            "CREATE TABLE IF NOT EXISTS floor_tokens (digest TEXT PRIMARY KEY,"
            " username TEXT NOT NULL, issued_at BIGINT NOT NULL)"
        )
        connection.execute(
            "INSERT INTO floor_tokens VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
            (self.known_digest, USERNAME, int(time.time())),
        )

    def write(self) -> None:
        self._get().execute(
            "INSERT INTO floor_tokens (digest, username, issued_at) VALUES (%s, %s, %s)",
            (secrets.token_hex(32), USERNAME, int(time.time())),
        )

    def read(self) -> None:
        row = (
            self._get()
            .execute("SELECT username FROM floor_tokens WHERE digest = %s", (self.known_digest,))
            .fetchone()
        )
        assert row is not None

    def close(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
