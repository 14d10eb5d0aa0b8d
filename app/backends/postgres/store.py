"""Shared durable store: refresh-token digests in one PostgreSQL database every host uses.

Every operation is one statement, so one round trip: a plain one where a single row is
read or written (a login under SPEC.md's defaults is one INSERT, a refresh one SELECT),
else a call of one of the functions the schema made (``sql/functions.sql``), which read
and change several rows in one transaction. Each runs in autocommit: it is committed
before it is answered, or not at all, so a connection lost in the middle (a restart,
``pg_terminate_backend``) never leaves half a rotation behind. The tables, their
versions and their upgrade are in ``app.backends.postgres.schema``; connections, timeouts
and failures in ``app.backends.postgres.client``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import astuple
from typing import Any

import psycopg

from app.backends.interface import (
    DIGEST_PREFIX_LENGTH,
    PURGE_BATCH,
    RETIRED_GENERATIONS_KEPT,
    BackendUnavailable,
    DenyEntry,
    Imported,
    LoginClient,
    Outcome,
    Record,
    RefreshTokenPolicy,
    RefreshTokenStore,
    Revocation,
    Rotation,
    SessionPage,
    StoredToken,
    TokenRecord,
    batches,
    lineage_digest,
    token_digest,
)
from app.backends.postgres.client import POSTGRES_FAILURES, ProcessPool
from app.backends.postgres.process import Connection
from app.config.clock import SYSTEM_CLOCK, Clock

#: A live token: neither retired nor expired (``%(now)s``: the whole second).
LIVE = "retired_at IS NULL AND (expires_at IS NULL OR expires_at > %(now)s)"
OWNER_OF = (  # positional parameters: psycopg reorders named ones on each call
    "SELECT username FROM refresh_tokens WHERE digest = %s AND retired_at IS NULL"
    " AND (expires_at IS NULL OR expires_at > %s)"
)
TOKENS_OF = (
    "SELECT digest, issued_at FROM refresh_tokens"  # noqa: S608 (constants only)
    f" WHERE username = %(username)s AND {LIVE} ORDER BY issued_at, sequence NULLS FIRST, digest"
)
COUNT = f"SELECT count(*) FROM refresh_tokens WHERE {LIVE}"  # noqa: S608
#: SPEC.md's login: one INSERT. ``relaxed`` durability commits it without waiting for
#: the WAL's flush (``synchronous_commit`` off, for this transaction only).
INSERT = "INSERT INTO refresh_tokens (digest, username, issued_at) VALUES (%s, %s, %s)"
INSERT_RELAXED = (
    "INSERT INTO refresh_tokens (digest, username, issued_at)"
    " SELECT %s, %s, %s FROM set_config('synchronous_commit', 'off', true)"
)
ISSUE = "SELECT token_store_issue(%s, %s, %s, %s, %s, %s)"
ISSUE_RELAXED = (
    "SELECT token_store_issue(%s, %s, %s, %s, %s, %s)"
    " FROM set_config('synchronous_commit', 'off', true)"
)
#: The columns of a token as ``export`` yields them (``StoredToken``'s fields, in order).
EXPORTED = (
    "digest, username, issued_at, expires_at, family, generation, retired_at, parent, lineage"
)
IMPORT_TOKEN = (
    f"INSERT INTO refresh_tokens ({EXPORTED}, sequence)"  # noqa: S608 (constants only)
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s,"
    " CASE WHEN %s THEN nextval('refresh_tokens_sequence') END) ON CONFLICT (digest) DO NOTHING"
)
IMPORT_DENY_ENTRY = (
    "INSERT INTO denied_tokens (digest, expires_at) VALUES (%s, %s) ON CONFLICT (digest)"
    " DO UPDATE SET expires_at = greatest(denied_tokens.expires_at, excluded.expires_at)"
)
#: Whether the store holds any token or deny entry, even an expired one.
HOLDS_ANYTHING = (
    "SELECT EXISTS (SELECT 1 FROM refresh_tokens) OR EXISTS (SELECT 1 FROM denied_tokens)"
)
#: What names the table among every server: the server's start (to the microsecond),
#: the database, and the table's oid there (its schema's).
IDENTITY = (
    "SELECT pg_postmaster_start_time(), current_database(), to_regclass('refresh_tokens')::oid"
)
#: What a read-only server (a standby, default_transaction_read_only) says to a write.
READ_ONLY_MESSAGE = "the server refused the write as read-only (a standby, or read-only mode)"


class PostgresTokenStore(RefreshTokenStore):
    """Refresh tokens in one PostgreSQL database, shared by every worker of every host.

    Durability: each write commits as the server's ``synchronous_commit`` says (``on``,
    PostgreSQL's default: in the WAL on disk before the answer). ``durability=relaxed``
    commits logins with ``synchronous_commit = off`` (rotations and revokes are never
    relaxed): a crash of the server or its host may lose its last moments of logins.
    """

    remote = True
    #: Its pool belongs to the process that made it (a forked worker makes its own), so
    #: the one the start-up check opens is kept for the first requests.
    pooled_per_process = True

    def __init__(
        self,
        client: ProcessPool,
        policy: RefreshTokenPolicy | None = None,
        durability: str = "normal",
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(policy, clock)
        self.client = client
        self.url = client.url
        self.timeout = client.timeout
        self.relaxed = durability == "relaxed"
        self.location = client.location

    def issue(self, token: str, username: str, client: LoginClient | None = None) -> int | None:
        now, policy = self.clock(), self.policy
        digest = token_digest(token)
        if not (policy.lifetime or policy.per_user):  # SPEC.md's defaults: one INSERT
            self._execute(INSERT_RELAXED if self.relaxed else INSERT, (digest, username, int(now)))
            return None
        expires_at = int(now) + policy.lifetime if policy.lifetime else None
        self._execute(
            ISSUE_RELAXED if self.relaxed else ISSUE,
            (digest, username, now, expires_at, policy.per_user, PURGE_BATCH),
        )
        return None

    def owner_of(self, token: str) -> str | None:
        row = self._fetch_one(OWNER_OF, (token_digest(token), math.floor(self.clock())))
        return None if row is None else str(row[0])

    def rotate(self, token: str, successor: str, username: str) -> Rotation:
        policy = self.policy
        row = self._fetch_one(
            "SELECT outcome, family_digest FROM token_store_rotate"
            "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                token_digest(token), token_digest(successor), username, self.clock(),
                policy.lifetime, policy.reuse_grace, RETIRED_GENERATIONS_KEPT, PURGE_BATCH,
                bool(policy.per_user or policy.lifetime), lineage_digest(token),
            ),
        )  # fmt: skip
        assert row is not None  # a function's one row
        return Rotation(Outcome(row[0]), str(row[1])[:DIGEST_PREFIX_LENGTH])

    def revoke(self, token: str) -> Revocation:
        row = self._fetch_one(
            "SELECT known, reused, family_digest, owner FROM token_store_revoke(%s, %s, %s)",
            (token_digest(token), lineage_digest(token), self.clock()),
        )
        assert row is not None  # a function's one row
        known, reused, family, owner = row
        return Revocation(bool(known), bool(reused), str(family)[:DIGEST_PREFIX_LENGTH], owner)

    def purge_expired(self, limit: int = PURGE_BATCH) -> int:
        return int(self._value("SELECT token_store_purge(%s, %s)", (self.clock(), limit)))

    def tokens_of(self, username: str) -> list[TokenRecord]:
        with self._connection() as connection:
            rows = connection.execute(
                TOKENS_OF,
                {"username": username, "now": math.floor(self.clock())},
            ).fetchall()
        return [TokenRecord.of(digest, username, int(at)) for digest, at in rows]

    def sessions_of(self, username: str, limit: int = 50, after: str | None = None) -> SessionPage:
        raise NotImplementedError  # sessions come in the next step

    def end_session(self, username: str, session_id: str) -> bool:
        raise NotImplementedError

    def log_out_everywhere(self, username: str, at: int) -> int:
        raise NotImplementedError

    def cutoffs(self, newer_than: int) -> dict[str, int]:
        raise NotImplementedError

    def revoke_all(self, username: str) -> int:
        return int(self._value("SELECT token_store_revoke_all(%s, %s)", (username, self.clock())))

    def _revoke_digest(self, prefix: str) -> int:
        return int(self._value("SELECT token_store_revoke_prefix(%s, %s)", (prefix, self.clock())))

    def deny(self, digest: str, until: float) -> None:
        now = self.clock()
        if until <= now:
            return
        # one statement: a bounded batch of ended entries (through the index), then this one
        self._execute(
            "WITH due AS MATERIALIZED (SELECT digest FROM denied_tokens"
            " WHERE expires_at <= %(now)s AND digest <> %(digest)s"
            " LIMIT %(batch)s FOR UPDATE SKIP LOCKED),"
            " purged AS (DELETE FROM denied_tokens USING due"
            " WHERE denied_tokens.digest = due.digest)"
            " INSERT INTO denied_tokens (digest, expires_at) VALUES (%(digest)s, %(until)s)"
            " ON CONFLICT (digest) DO UPDATE"
            " SET expires_at = greatest(denied_tokens.expires_at, excluded.expires_at)",
            {"digest": digest, "until": until, "now": now, "batch": PURGE_BATCH},
        )

    def is_denied(self, *digests: str) -> bool:
        row = self._fetch_one(
            "SELECT 1 FROM denied_tokens WHERE digest = ANY(%s) AND expires_at > %s LIMIT 1",
            (list(digests), self.clock()),
        )
        return row is not None

    def count(self) -> int:
        return int(
            self._value(
                COUNT,
                {"now": math.floor(self.clock())},
            )
        )

    def ping(self) -> None:
        with self._connection() as connection:
            connection.execute("SELECT 1")

    def close(self) -> None:
        self.client.close()

    def export(self) -> Iterator[Record]:
        try:
            with (
                self._copying() as connection,
                connection.transaction(),  # one snapshot (REPEATABLE READ): one moment
                connection.cursor(name="token_store_export") as cursor,  # read in batches
            ):
                cursor.execute(
                    f"SELECT {EXPORTED} FROM refresh_tokens"  # noqa: S608 (constants only)
                    " ORDER BY retired_at IS NOT NULL, username, issued_at,"
                    " sequence NULLS FIRST, digest"
                )
                for row in cursor:
                    yield StoredToken(*row)
                for digest, until in connection.execute(
                    "SELECT digest, expires_at FROM denied_tokens"
                ):
                    yield DenyEntry(digest, until)
        except POSTGRES_FAILURES as error:
            raise BackendUnavailable(self.client.message("PostgreSQL store", error)) from error

    def import_records(self, records: Iterable[Record]) -> Imported:
        tokens = live = denied = 0
        try:
            with self._copying() as connection:
                for batch in batches(records):
                    denies = [astuple(r) for r in batch if isinstance(r, DenyEntry)]
                    rows = [r for r in batch if isinstance(r, StoredToken)]
                    # a statement for the live rows (numbered in the order given, their
                    # order of issue, as issue() numbers), then one for the others: each
                    # row count is of those written
                    groups = (
                        [(*astuple(r), True) for r in rows if r.retired_at is None],
                        [(*astuple(r), False) for r in rows if r.retired_at is not None],
                    )
                    with connection.transaction(), connection.cursor() as cursor:
                        written = []
                        for group in groups:
                            cursor.executemany(IMPORT_TOKEN, group)
                            written.append(max(cursor.rowcount, 0))  # -1 after no row at all
                        cursor.executemany(IMPORT_DENY_ENTRY, denies)
                    tokens, live, denied = (
                        tokens + sum(written),
                        live + written[0],
                        denied + len(denies),
                    )
        except POSTGRES_FAILURES as error:
            raise BackendUnavailable(self.client.message("PostgreSQL store", error)) from error
        return Imported(tokens, live, denied)

    def holds_anything(self) -> bool:
        return bool(self._value(HOLDS_ANYTHING, ()))

    def is_same_store(self, other: RefreshTokenStore) -> bool:
        # one table by any host name, address, port or socket
        return isinstance(other, PostgresTokenStore) and self._identity() == other._identity()

    def _identity(self) -> tuple[Any, ...]:
        with self._connection() as connection:
            row = connection.execute(IDENTITY).fetchone()
        return tuple(row or ())

    @contextmanager
    def _copying(self) -> Iterator[Connection]:
        """Yield a connection of its own, with no statement timeout: a copy takes its time."""
        with psycopg.connect(self.client.conninfo, autocommit=True) as connection:
            connection.execute("SET statement_timeout = 0")
            yield connection

    def _execute(self, statement: str, parameters: Any) -> None:
        self._fetch_one(statement, parameters, fetch=False)

    def _fetch_one(
        self, statement: str, parameters: Any, fetch: bool = True
    ) -> tuple[Any, ...] | None:
        with self._connection() as connection:
            cursor = connection.execute(statement, parameters)
            row: tuple[Any, ...] | None = cursor.fetchone() if fetch else None
        return row

    def _value(self, statement: str, parameters: Any) -> Any:
        row = self._fetch_one(statement, parameters)
        return None if row is None else row[0]

    @contextmanager
    def _connection(self) -> Iterator[Connection]:
        """Yield a pooled connection; turn every failure into one BackendUnavailable."""
        try:
            with self.client.connection() as connection:
                yield connection
        except psycopg.errors.ReadOnlySqlTransaction as error:
            raise BackendUnavailable(
                self.client.message("PostgreSQL store", error, READ_ONLY_MESSAGE)
            ) from error
        except POSTGRES_FAILURES as error:
            raise BackendUnavailable(self.client.message("PostgreSQL store", error)) from error
