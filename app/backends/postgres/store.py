"""Shared durable store: refresh-token digests in one PostgreSQL database every host uses.

Every operation is one statement, so one round trip: a plain one where a single row is
read or written (a login under SPEC.md's defaults is one INSERT, a refresh one SELECT, and
once a minute per session an UPDATE of its last use),
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
    UNKNOWN_CLIENT,
    BackendUnavailable,
    Cutoff,
    DenyEntry,
    IdleSession,
    Imported,
    Issued,
    LiveToken,
    LoginClient,
    Outcome,
    Record,
    RefreshTokenPolicy,
    RefreshTokenStore,
    Revocation,
    Rotation,
    Session,
    SessionPage,
    StoredToken,
    TokenRecord,
    batches,
    check_page_limit,
    is_session_id,
    lineage_digest,
    new_session_id,
    page_of,
    parse_session_cursor,
    to_the_minute,
    token_digest,
)
from app.backends.postgres.client import POSTGRES_FAILURES, ProcessPool
from app.backends.postgres.process import Connection
from app.config.clock import SYSTEM_CLOCK, Clock

#: A live token: neither retired nor expired (``%(now)s``: the whole second).
LIVE = "retired_at IS NULL AND (expires_at IS NULL OR expires_at > %(now)s)"
OWNER_OF = (  # positional parameters: psycopg reorders named ones on each call
    "SELECT username, last_used_at, family FROM refresh_tokens WHERE digest = %s"
    " AND retired_at IS NULL AND (expires_at IS NULL OR expires_at > %s)"
)
DESCRIBE = (
    "SELECT username, issued_at, expires_at, last_used_at FROM refresh_tokens WHERE digest = %s"
    " AND retired_at IS NULL AND (expires_at IS NULL OR expires_at > %s)"
)
#: A session's last use, written at most once a minute (by ``owner_of``).
TOUCH = (
    "UPDATE refresh_tokens SET last_used_at = %s WHERE digest = %s"
    " AND (last_used_at IS NULL OR last_used_at < %s)"
)
#: A session's columns, as ``Session`` takes them after its username.
SESSION_FIELDS = "session, logged_in_at, last_used_at, address, user_agent"
#: A page of one user's live sessions after a (login time, id), through the index by
#: username in its order (the partial index's own condition is in the WHERE clause).
SESSIONS_PAGE = (
    f"SELECT {SESSION_FIELDS} FROM refresh_tokens"  # noqa: S608 (constants only)
    " WHERE username = %(username)s AND retired_at IS NULL AND logged_in_at <= %(at)s"
    " AND (logged_in_at < %(at)s OR session > %(session)s)"
    " AND (expires_at IS NULL OR expires_at > %(now)s)"
    " AND (%(idle)s::bigint IS NULL OR last_used_at > %(idle)s)"
    " ORDER BY logged_in_at DESC, session LIMIT %(limit)s"
)
TOKENS_OF = (
    "SELECT digest, issued_at FROM refresh_tokens"  # noqa: S608 (constants only)
    f" WHERE username = %(username)s AND {LIVE} ORDER BY issued_at, sequence NULLS FIRST, digest"
)
COUNT = f"SELECT count(*) FROM refresh_tokens WHERE {LIVE}"  # noqa: S608
#: SPEC.md's login: one INSERT. ``relaxed`` durability commits it without waiting for
#: the WAL's flush (``synchronous_commit`` off, for this transaction only).
#: It returns the user's cut-off, read in the same statement.
INSERT = (
    f"INSERT INTO refresh_tokens (digest, username, issued_at, {SESSION_FIELDS})"  # noqa: S608
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
    " RETURNING (SELECT at FROM cutoffs WHERE username = refresh_tokens.username)"
)
INSERT_RELAXED = (
    f"INSERT INTO refresh_tokens (digest, username, issued_at, {SESSION_FIELDS})"  # noqa: S608
    " SELECT %s, %s, %s, %s, %s, %s, %s, %s FROM set_config('synchronous_commit', 'off', true)"
    " RETURNING (SELECT at FROM cutoffs WHERE username = refresh_tokens.username)"
)
ISSUE = "SELECT cutoff, ended FROM token_store_login(%s, %s, %s, %s, %s, %s, %s, %s, %s)"
ISSUE_RELAXED = (
    "SELECT cutoff, ended FROM set_config('synchronous_commit', 'off', true),"
    " token_store_login(%s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
#: The columns of a token as ``export`` yields them (``StoredToken``'s fields, in order).
EXPORTED = (
    "digest, username, issued_at, expires_at, family, generation, retired_at, parent, lineage,"
    f" {SESSION_FIELDS}"
)
IMPORT_TOKEN = (
    f"INSERT INTO refresh_tokens ({EXPORTED}, sequence)"  # noqa: S608 (constants only)
    f" VALUES ({'%s, ' * 14}"
    " CASE WHEN %s THEN nextval('refresh_tokens_sequence') END) ON CONFLICT (digest) DO NOTHING"
)
IMPORT_CUTOFF = (
    "INSERT INTO cutoffs (username, at) VALUES (%s, %s)"
    " ON CONFLICT (username) DO UPDATE SET at = greatest(cutoffs.at, excluded.at)"
)
IMPORT_DENY_ENTRY = (
    "INSERT INTO denied_tokens (digest, expires_at) VALUES (%s, %s) ON CONFLICT (digest)"
    " DO UPDATE SET expires_at = greatest(denied_tokens.expires_at, excluded.expires_at)"
)
#: Whether the store holds any token or deny entry, even an expired one.
HOLDS_ANYTHING = (
    "SELECT EXISTS (SELECT 1 FROM refresh_tokens) OR EXISTS (SELECT 1 FROM denied_tokens)"
    " OR EXISTS (SELECT 1 FROM cutoffs)"
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

    def issue(self, token: str, username: str, client: LoginClient | None = None) -> Issued:
        now, policy = self.clock(), self.policy
        digest, issued_at = token_digest(token), math.floor(now)
        seen = (client or UNKNOWN_CLIENT).kept()
        if not (policy.lifetime or policy.per_user):  # SPEC.md's defaults: one INSERT
            row = self._fetch_one(
                INSERT_RELAXED if self.relaxed else INSERT,
                (digest, username, issued_at, new_session_id(), issued_at,
                 to_the_minute(now), seen.address, seen.user_agent),
            )  # fmt: skip
            ended = 0  # nothing is evicted without a limit
        else:
            expires_at = issued_at + policy.lifetime if policy.lifetime else None
            row = self._fetch_one(
                ISSUE_RELAXED if self.relaxed else ISSUE,
                (digest, username, now, expires_at, policy.per_user, PURGE_BATCH,
                 new_session_id(), seen.address, seen.user_agent),
            )  # fmt: skip
            ended = 0 if row is None else int(row[1])
        cutoff = None if row is None or row[0] is None else int(row[0])
        return Issued(cutoff, ended)

    def owner_of(self, token: str) -> str | IdleSession | None:
        digest, now = token_digest(token), self.clock()
        row = self._fetch_one(OWNER_OF, (digest, math.floor(now)))
        if row is None:
            return None
        username, last_used_at, family = row
        minute = to_the_minute(now)
        if self.policy.is_idle(last_used_at, now):
            self._execute("SELECT token_store_forget_live(%s, %s)", (digest, family))
            return IdleSession(str(username))
        if last_used_at is None or last_used_at < minute:  # once a minute: a write
            self._execute(TOUCH, (minute, digest, minute))
        return str(username)

    def describe(self, token: str) -> LiveToken | None:
        now = self.clock()
        row = self._fetch_one(DESCRIBE, (token_digest(token), math.floor(now)))
        if row is None or self.policy.is_idle(row[3], now):
            return None
        return LiveToken(str(row[0]), int(row[1]), row[2])

    def rotate(self, token: str, successor: str, username: str | None) -> Rotation:
        policy, now = self.policy, self.clock()
        row = self._fetch_one(
            "SELECT outcome, family_digest, owner FROM token_store_rotate"
            "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                token_digest(token), token_digest(successor), username, now,
                policy.lifetime, policy.reuse_grace, RETIRED_GENERATIONS_KEPT, PURGE_BATCH,
                bool(policy.per_user or policy.lifetime), lineage_digest(token),
                policy.idle_since(now), Outcome.IDLE.value,
            ),
        )  # fmt: skip
        assert row is not None  # a function's one row
        return Rotation(Outcome(row[0]), str(row[1])[:DIGEST_PREFIX_LENGTH], str(row[2]))

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
        check_page_limit(limit)
        at, session = (1 << 62, "") if after is None else parse_session_cursor(after)
        now = self.clock()
        with self._connection() as connection:
            rows = connection.execute(
                SESSIONS_PAGE,
                {
                    "username": username, "at": at, "session": session,
                    "now": math.floor(now), "idle": self.policy.idle_since(now),
                    "limit": limit + 1,
                },
            ).fetchall()  # fmt: skip
        return page_of([Session(row[0], username, *row[1:]) for row in rows], limit)

    def end_session(self, username: str, session_id: str) -> bool:
        if not is_session_id(session_id):
            return False  # no session has that id
        now = self.clock()
        return bool(
            self._value(
                "SELECT token_store_end_session(%s, %s, %s, %s)",
                (username, session_id, now, self.policy.idle_since(now)),
            )
        )

    def log_out_everywhere(self, username: str, at: int) -> int:
        return int(
            self._value(
                "SELECT token_store_log_out_everywhere(%s, %s, %s)", (username, at, self.clock())
            )
        )

    def cutoffs(self, newer_than: int) -> dict[str, int]:
        with self._connection() as connection:
            rows = connection.execute(
                "SELECT username, at FROM cutoffs WHERE at > %s", (newer_than,)
            ).fetchall()
        return {username: int(at) for username, at in rows}

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
                for username, at in connection.execute("SELECT username, at FROM cutoffs"):
                    yield Cutoff(username, int(at))
        except POSTGRES_FAILURES as error:
            raise BackendUnavailable(self.client.message("PostgreSQL store", error)) from error

    def import_records(self, records: Iterable[Record]) -> Imported:
        tokens = live = denied = cutoffs = 0
        sessions: dict[str, str] = {}
        try:
            with self._copying() as connection:
                for batch in batches(records):
                    denies = [astuple(r) for r in batch if isinstance(r, DenyEntry)]
                    ends = [astuple(r) for r in batch if isinstance(r, Cutoff)]
                    rows = [r.with_session(sessions) for r in batch if isinstance(r, StoredToken)]
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
                        cursor.executemany(IMPORT_CUTOFF, ends)
                    tokens, live, denied, cutoffs = (
                        tokens + sum(written),
                        live + written[0],
                        denied + len(denies),
                        cutoffs + len(ends),
                    )
        except POSTGRES_FAILURES as error:
            raise BackendUnavailable(self.client.message("PostgreSQL store", error)) from error
        return Imported(tokens, live, denied, cutoffs)

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
