"""Copy every refresh token and deny entry from one store to another (``flask tokens copy``).

Each backend keeps the same facts about a token (its digest, username, issue time,
expiry, family, generation, retirement, parent, lineage), in its own layout; this reads them
out of one and writes them into another, so a token refreshes, rotates, and is
recognised as reused exactly as before. Expired tokens and entries are left behind.

The target must be empty, and must not be the source however its URL is spelled: a
second copy into a target that holds the first one's tokens would keep there what the
source has revoked, retired or revoked with its family since, so it is refused (as is
copying a store onto itself). An interrupted copy is run again into the emptied target.

The copy is of one moment of the source: the service should not be writing to it
meanwhile (docs/stores.md, "Moving tokens").
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from app.backends.interface import BackendUnavailable, RefreshTokenStore
from app.backends.postgres.client import postgres_location
from app.backends.redis.client import redis_location

#: Tokens written per transaction (or per pipeline).
BATCH = 1000
#: Whether a SQLite or PostgreSQL target has a row in any table a copy writes into.
HOLDS_ANYTHING = (
    "SELECT EXISTS (SELECT 1 FROM refresh_tokens) OR EXISTS (SELECT 1 FROM denied_tokens)"
)
#: Every Redis key of the token store starts so: a target must have none.
REDIS_KEYS = "rt:*"


class CopyRefusedError(Exception):
    """The target is the source itself, or holds tokens or deny entries already."""


@dataclass(frozen=True)
class StoredToken:
    """What every backend records of one refresh token."""

    digest: str
    username: str
    issued_at: int
    expires_at: int | None = None
    family: str | None = None
    generation: int | None = None
    retired_at: float | None = None
    parent: str | None = None
    lineage: str | None = None


COLUMNS = "digest, username, issued_at, expires_at, family, generation, retired_at, parent, lineage"
#: The fields of a token's Redis hash written as they are (``retired_at`` is a float's repr).
REDIS_FIELDS = ("username", "issued_at", "expires_at", "family", "generation", "parent", "lineage")


@dataclass(frozen=True)
class Copied:
    """What ``copy_tokens`` wrote: tokens (of which live ones), and deny entries; a digest
    found in the target meanwhile is not written, and not counted."""

    tokens: int
    live: int
    denied: int


def copy_tokens(source: RefreshTokenStore, target: RefreshTokenStore) -> Copied:
    """Copy every unexpired token and deny entry of ``source`` into the empty ``target``;
    raise CopyRefusedError if ``target`` is ``source`` or holds anything, and
    BackendUnavailable if either cannot be read or written."""
    try:
        return _copy(source, target)
    except _failures() as error:
        raise BackendUnavailable(f"{type(error).__name__}: {error}") from error


def _failures() -> tuple[type[BaseException], ...]:
    """Return what the three backends' libraries raise when a store cannot answer."""
    import psycopg
    import redis

    return (sqlite3.Error, OSError, psycopg.Error, redis.RedisError)


def _copy(source: RefreshTokenStore, target: RefreshTokenStore) -> Copied:
    now = source.clock()
    source.ping()  # an older SQLite file gains its columns; a database its tables
    # Before the target is opened: through a hard link to the source's file, SQLite would
    # look for a write-ahead log named after the link, and not find the source's.
    if _same_store(source, target):
        raise CopyRefusedError(
            f"the target {_place(target)} is the store copied from (TOKEN_STORE_URL):"
            " give --to another store"
        )
    target.ping()
    if _holds_anything(target):
        raise CopyRefusedError(
            f"the target {_place(target)} holds refresh tokens or deny entries already,"
            " and a copy goes into an empty store only: empty it (docs/stores.md,"
            ' "Moving tokens") and copy again'
        )
    tokens = live = 0
    unexpired = (t for t in _tokens_of(source) if t.expires_at is None or t.expires_at > now)
    for batch in _batches(unexpired):
        written, written_live = _write(target, batch, now)
        tokens += written
        live += written_live
    denied = 0
    for digest, until in _denied_of(source):
        if until > now:
            target.deny(digest, until)
            denied += 1
    return Copied(tokens, live, denied)


def _batches(tokens: Iterable[StoredToken]) -> Iterator[list[StoredToken]]:
    iterator = iter(tokens)
    while batch := list(islice(iterator, BATCH)):
        yield batch


def _kind(store: RefreshTokenStore) -> str:
    """Return the backend of ``store``: sqlite, postgres or redis."""
    from app.backends.postgres.store import (
        PostgresTokenStore,  # an operator's command: load them all
    )
    from app.backends.sqlite.store import SQLiteTokenStore

    if isinstance(store, SQLiteTokenStore):
        return "sqlite"
    return "postgres" if isinstance(store, PostgresTokenStore) else "redis"


def _place(store: Any) -> str:
    """Return where ``store`` is, for a message: never a password."""
    kind = _kind(store)
    if kind == "sqlite":
        return os.path.abspath(str(store.path))
    return postgres_location(store.url) if kind == "postgres" else redis_location(store.url)


def _same_store(source: Any, target: Any) -> bool:
    """Return whether ``target`` is ``source``, however their URLs are spelled.

    The stores are asked, not their URLs compared: one file by any path (relative,
    through a symbolic or hard link), one PostgreSQL table by any host name, port or
    socket, one Redis database by any address (a key written into one is read from
    the other).
    """
    kind = _kind(source)
    if kind != _kind(target):
        return False
    if kind == "sqlite":  # the source's file exists: ping made it
        return os.path.exists(target.path) and os.path.samefile(source.path, target.path)
    if kind == "postgres":
        return _postgres_identity(source) == _postgres_identity(target)
    source_client, target_client = _redis(source), _redis(target)
    probe = f"rt:copy-probe:{secrets.token_hex(16)}"
    target_client.set(probe, "", px=60_000)  # gone by itself should the delete fail
    try:
        return bool(source_client.exists(probe))
    finally:
        target_client.delete(probe)


def _postgres_identity(store: RefreshTokenStore) -> tuple[Any, ...]:
    """Return what names the table of ``store`` among every server: the server's start
    (to the microsecond), the database, and the table's oid there (its schema's)."""
    with _postgres(store) as connection:
        row = connection.execute(
            "SELECT pg_postmaster_start_time(), current_database(),"
            " to_regclass('refresh_tokens')::oid"
        ).fetchone()
    return tuple(row)


def _holds_anything(store: RefreshTokenStore) -> bool:
    """Return whether ``store`` holds any token or deny entry, even an expired one."""
    kind = _kind(store)
    if kind == "redis":
        return next(iter(_redis(store).scan_iter(REDIS_KEYS, count=BATCH)), None) is not None
    if kind == "sqlite":
        with contextlib.closing(_sqlite_reader(store)) as connection:
            (found,) = connection.execute(HOLDS_ANYTHING).fetchone()
    else:
        with _postgres(store) as connection:
            (found,) = connection.execute(HOLDS_ANYTHING).fetchone()
    return bool(found)


def _tokens_of(store: RefreshTokenStore) -> Iterator[StoredToken]:
    kind = _kind(store)
    if kind == "sqlite":
        with contextlib.closing(_sqlite_reader(store)) as connection:
            for row in connection.execute(f"SELECT {COLUMNS} FROM refresh_tokens"):  # noqa: S608
                yield StoredToken(*row)
    elif kind == "postgres":
        with (
            _postgres(store) as connection,
            connection.transaction(),
            connection.cursor(name="token_store_copy") as cursor,  # read in batches
        ):
            cursor.execute(f"SELECT {COLUMNS} FROM refresh_tokens")  # noqa: S608
            for row in cursor:
                yield StoredToken(*row)
    else:
        client = _redis(store)
        for keys in _batches_of(client.scan_iter("rt:token:*", count=BATCH)):
            reads = client.pipeline(transaction=False)
            for key in keys:
                reads.hgetall(key)
            for key, fields in zip(keys, reads.execute(), strict=True):
                if fields:  # expired between the scan and the read
                    yield _from_redis(key.removeprefix("rt:token:"), fields)


def _denied_of(store: RefreshTokenStore) -> Iterator[tuple[str, float]]:
    kind = _kind(store)
    if kind == "sqlite":
        with contextlib.closing(_sqlite_reader(store)) as connection:
            yield from connection.execute("SELECT digest, expires_at FROM denied_tokens")
    elif kind == "postgres":
        with _postgres(store) as connection:
            yield from connection.execute("SELECT digest, expires_at FROM denied_tokens")
    else:
        client = _redis(store)
        for key in client.scan_iter("rt:denied:*", count=BATCH):
            until = client.get(key)
            if until is not None:
                yield key.removeprefix("rt:denied:"), float(until)


def _write(target: RefreshTokenStore, batch: list[StoredToken], now: float) -> tuple[int, int]:
    """Write ``batch`` into ``target`` in one transaction; return how many tokens were
    written, and how many of those are live (a digest there already is left alone)."""
    kind = _kind(target)
    rows = [
        (t.digest, t.username, t.issued_at, t.expires_at, t.family, t.generation,
         t.retired_at, t.parent, t.lineage)
        for t in batch
    ]  # fmt: skip
    live_rows: list[tuple[Any, ...]] = []
    retired_rows: list[tuple[Any, ...]] = []
    for row, token in zip(rows, batch, strict=True):
        (live_rows if token.retired_at is None else retired_rows).append(row)
    # a statement for the live rows, then one for the others: each row count is of those written
    if kind == "sqlite":
        with contextlib.closing(_sqlite_writer(target)) as connection:
            connection.execute("BEGIN IMMEDIATE")
            written = [
                connection.executemany(
                    f"INSERT OR IGNORE INTO refresh_tokens ({COLUMNS})"  # noqa: S608
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    group,
                ).rowcount
                for group in (live_rows, retired_rows)
            ]
            connection.execute("COMMIT")
    elif kind == "postgres":
        with _postgres(target) as connection, connection.transaction():
            cursor, written = connection.cursor(), []
            for group in (live_rows, retired_rows):
                cursor.executemany(
                    f"INSERT INTO refresh_tokens ({COLUMNS})"  # noqa: S608
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (digest) DO NOTHING",
                    group,
                )
                written.append(max(cursor.rowcount, 0))  # -1 after no row at all
    else:
        return _write_redis(_redis(target), batch, now)
    return sum(written), written[0]


def _sqlite_reader(store: Any) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{store.path}?mode=ro", uri=True, timeout=store.timeout)


def _sqlite_writer(store: Any) -> sqlite3.Connection:
    connection = sqlite3.connect(store.path, timeout=store.timeout, isolation_level=None)
    connection.execute("PRAGMA synchronous = FULL")  # each batch on disk before the next
    return connection


@contextlib.contextmanager
def _postgres(store: Any) -> Iterator[Any]:
    """Yield a connection of its own, with no statement timeout: a copy takes its time."""
    import psycopg  # only PostgreSQL stores need it

    with psycopg.connect(store.client.conninfo, autocommit=True) as connection:
        connection.execute("SET statement_timeout = 0")
        yield connection


def _redis(store: Any) -> Any:
    import redis  # only Redis stores need it

    return redis.Redis.from_url(store.url, decode_responses=True, socket_timeout=60)


def _batches_of(keys: Iterable[str]) -> Iterator[list[str]]:
    iterator = iter(keys)
    while batch := list(islice(iterator, BATCH)):
        yield batch


def _from_redis(digest: str, fields: dict[str, str]) -> StoredToken:
    def number(name: str, kind: type[Any]) -> Any:
        return kind(fields[name]) if name in fields else None

    return StoredToken(
        digest, fields["username"], int(fields["issued_at"]), number("expires_at", int),
        fields.get("family"), number("generation", int), number("retired_at", float),
        fields.get("parent"), fields.get("lineage"),
    )  # fmt: skip


def _write_redis(client: Any, batch: list[StoredToken], now: float) -> tuple[int, int]:
    """Write tokens as app/backends/redis/store.py lays them out, each with its index entries;
    return how many were written, and how many of those are live."""
    known = client.pipeline(transaction=False)
    for token in batch:
        known.exists(f"rt:token:{token.digest}")
    writes = client.pipeline(transaction=True)
    tokens = live = 0
    for token, exists in zip(batch, known.execute(), strict=True):
        if exists:
            continue
        tokens += 1
        live += token.retired_at is None
        key = f"rt:token:{token.digest}"
        fields = {
            name: value for name in REDIS_FIELDS if (value := getattr(token, name)) is not None
        }
        if token.retired_at is not None:
            fields["retired_at"] = repr(token.retired_at)
        writes.hset(key, mapping=fields)
        if token.retired_at is None:  # a live token: in its user's and the count's indexes
            writes.zadd(f"rt:user:{token.username}", {token.digest: token.issued_at * 1_000_000})
            writes.zadd("rt:digests", {token.digest: 0})
        if token.family is not None:
            writes.zadd(f"rt:family:{token.family}", {token.digest: token.generation or 0})
            if token.lineage is not None:  # the family known by its lineage
                lineage = {"family": token.family, "username": token.username}
                writes.hset(f"rt:lineage:{token.lineage}", mapping=lineage)
        if token.expires_at is not None:
            ttl = max(1, math.floor((token.expires_at - now) * 1000))
            writes.zadd("rt:expiring", {token.digest + token.username: token.expires_at})
            writes.pexpire(key, ttl)
            if token.family is not None:
                writes.pexpire(f"rt:family:{token.family}", ttl)
            if token.family is not None and token.lineage is not None:
                writes.hset(f"rt:lineage:{token.lineage}", "expires_at", token.expires_at)
                writes.pexpire(f"rt:lineage:{token.lineage}", ttl)
    writes.execute()
    return tokens, live
