"""Copy every refresh token and deny entry from one store to another (``flask tokens copy``).

Each backend keeps the same facts about a token (its digest, username, issue time,
expiry, family, generation, retirement, parent, lineage), in its own layout; this reads them
out of one and writes them into another, so a token refreshes, rotates, and is
recognised as reused exactly as before. Expired tokens and entries are left behind. A
digest the target has already is left as it is there, so a copy can be run again.

The copy is of one moment of the source: the service should not be writing to it
meanwhile (docs/stores.md, "Moving tokens").
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any

from app.store.base import RefreshTokenStore, StoreUnavailableError

#: Tokens written per transaction (or per pipeline).
BATCH = 1000


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
    """What ``copy_tokens`` wrote: tokens (of which live ones), and deny entries."""

    tokens: int
    live: int
    denied: int


def copy_tokens(source: RefreshTokenStore, target: RefreshTokenStore) -> Copied:
    """Copy every unexpired token and deny entry of ``source`` into ``target``; raise
    StoreUnavailableError if either cannot be read or written."""
    try:
        return _copy(source, target)
    except _failures() as error:
        raise StoreUnavailableError(f"{type(error).__name__}: {error}") from error


def _failures() -> tuple[type[BaseException], ...]:
    """Return what the three backends' libraries raise when a store cannot answer."""
    import psycopg
    import redis

    return (sqlite3.Error, OSError, psycopg.Error, redis.RedisError)


def _copy(source: RefreshTokenStore, target: RefreshTokenStore) -> Copied:
    now = source.clock()
    source.ping()  # an older SQLite file gains its columns; a database its tables
    target.ping()
    tokens = live = 0
    unexpired = (t for t in _tokens_of(source) if t.expires_at is None or t.expires_at > now)
    for batch in _batches(unexpired):
        _write(target, batch, now)
        tokens += len(batch)
        live += sum(token.retired_at is None for token in batch)
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
    from app.store.postgres import PostgresTokenStore  # an operator's command: load them all
    from app.store.sqlite import SQLiteTokenStore

    if isinstance(store, SQLiteTokenStore):
        return "sqlite"
    return "postgres" if isinstance(store, PostgresTokenStore) else "redis"


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


def _write(target: RefreshTokenStore, batch: list[StoredToken], now: float) -> None:
    kind = _kind(target)
    rows = [
        (t.digest, t.username, t.issued_at, t.expires_at, t.family, t.generation,
         t.retired_at, t.parent, t.lineage)
        for t in batch
    ]  # fmt: skip
    if kind == "sqlite":
        with contextlib.closing(_sqlite_writer(target)) as connection:
            connection.execute("BEGIN IMMEDIATE")
            connection.executemany(
                f"INSERT OR IGNORE INTO refresh_tokens ({COLUMNS})"  # noqa: S608
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            connection.execute("COMMIT")
    elif kind == "postgres":
        with _postgres(target) as connection, connection.transaction():
            connection.cursor().executemany(
                f"INSERT INTO refresh_tokens ({COLUMNS})"  # noqa: S608
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (digest) DO NOTHING",
                rows,
            )
    else:
        _write_redis(_redis(target), batch, now)


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


def _write_redis(client: Any, batch: list[StoredToken], now: float) -> None:
    """Write tokens as app/store/redis.py lays them out, each with its index entries."""
    known = client.pipeline(transaction=False)
    for token in batch:
        known.exists(f"rt:token:{token.digest}")
    writes = client.pipeline(transaction=True)
    for token, exists in zip(batch, known.execute(), strict=True):
        if exists:
            continue
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
