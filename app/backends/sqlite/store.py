"""Embedded default store: one SQLite file in WAL mode, shared by every worker of a host."""

from __future__ import annotations

import contextlib
import hmac
import os
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import astuple

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
from app.backends.sqlite.files import ProcessWriter, ThreadConnections, connect_wal, error_text
from app.backends.sqlite.tables import create_schema, forget_live, purge, transaction
from app.config.clock import SYSTEM_CLOCK, Clock

#: The columns of a token as ``export`` yields them (``StoredToken``'s fields, in order).
EXPORTED = (
    "digest, username, issued_at, expires_at, family, generation, retired_at, parent, lineage,"
    " session, logged_in_at, last_used_at, address, user_agent"
)
#: A session's columns, as ``Session`` takes them after its username.
SESSION_FIELDS = "session, logged_in_at, last_used_at, address, user_agent"
#: A page of one user's live sessions, after a (login time, id), through the index by
#: username in its order (the partial index's own condition is in the WHERE clause).
SESSIONS_PAGE = (
    f"SELECT {SESSION_FIELDS} FROM refresh_tokens INDEXED BY refresh_tokens_by_session"  # noqa: S608
    " WHERE username = ? AND retired_at IS NULL AND logged_in_at <= ?"
    " AND (logged_in_at < ? OR session > ?)"
    " AND (expires_at IS NULL OR expires_at > ?) AND (? IS NULL OR last_used_at > ?)"
    " ORDER BY logged_in_at DESC, session LIMIT ?"
)


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

    A live token, one that ``owner_of`` and the listings know, is neither retired
    nor expired: ``retired_at IS NULL AND (expires_at IS NULL OR expires_at > now)``.

    Connections are opened lazily, so that nothing opened before gunicorn forks is
    ever used by a worker: one per thread of each process for reads, and one per
    process for writes, which its threads take in turn (app/backends/sqlite/files.py). What
    reads and changes several rows runs in one ``BEGIN IMMEDIATE`` transaction: the
    write lock is taken first, so no other process interleaves.
    """

    def __init__(
        self,
        path: str,
        timeout: float,
        policy: RefreshTokenPolicy | None = None,
        durability: str = "normal",
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(policy, clock)
        self.path = path
        self.location = os.path.abspath(path)
        self.timeout = timeout
        self.strict = durability == "strict"
        self._connections = ThreadConnections(self._connect)
        self._writer = ProcessWriter(self._connect, timeout)

    def issue(self, token: str, username: str, client: LoginClient | None = None) -> Issued:
        now, policy = self.clock(), self.policy
        issued_at = int(now)
        expires_at = issued_at + policy.lifetime if policy.lifetime else None
        seen = (client or UNKNOWN_CLIENT).kept()
        session = (new_session_id(), issued_at, to_the_minute(now), seen.address, seen.user_agent)
        if not (policy.lifetime or policy.per_user):  # SPEC.md's defaults: one statement
            try:
                with self._writer.connection() as connection:
                    # fetchall: a RETURNING statement commits when its last row is read
                    ((cutoff,),) = connection.execute(
                        "INSERT INTO refresh_tokens (digest, username, issued_at,"  # noqa: S608 (constants only)
                        f" {SESSION_FIELDS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                        " RETURNING (SELECT at FROM cutoffs WHERE username = ?)",
                        (token_digest(token), username, issued_at, *session, username),
                    ).fetchall()
            except sqlite3.Error as error:
                raise self._unavailable(error) from error
            return Issued(None if cutoff is None else int(cutoff))
        ended = 0
        with self._connection(write=True) as connection, transaction(connection):
            if policy.lifetime:
                purge(connection, now, PURGE_BATCH)
            if policy.per_user:
                live = connection.execute(
                    "SELECT digest, family FROM refresh_tokens"
                    " WHERE username = ? AND retired_at IS NULL"
                    " AND (expires_at IS NULL OR expires_at > ?)"
                    " ORDER BY issued_at, sequence, digest",  # same-second: order of issue
                    (username, now),
                ).fetchall()
                evicted = live[: max(0, len(live) - policy.per_user + 1)]
                for digest, family in evicted:
                    forget_live(connection, digest, family)
                ended = len(evicted)
            connection.execute(
                "INSERT INTO refresh_tokens (digest, username, issued_at, expires_at, sequence,"  # noqa: S608 (constants only)
                f" {SESSION_FIELDS}) VALUES (?, ?, ?, ?, (SELECT coalesce(max(sequence), 0) + 1"
                " FROM refresh_tokens WHERE sequence IS NOT NULL), ?, ?, ?, ?, ?)",
                (token_digest(token), username, issued_at, expires_at, *session),
            )  # the sequence: the end of its index
            return Issued(_cutoff_of(connection, username), ended)

    def owner_of(self, token: str) -> str | IdleSession | None:
        digest, now = token_digest(token), self.clock()
        try:  # _connection()'s read, without its generator frames: on every /token
            cursor = self._open().execute(
                "SELECT username, last_used_at, family FROM refresh_tokens WHERE digest = ?"
                " AND retired_at IS NULL AND (expires_at IS NULL OR expires_at > ?)",
                (digest, now),
            )
            row = cursor.fetchone()
        except sqlite3.Error as error:
            raise self._unavailable(error) from error
        if row is None:
            return None
        username, last_used_at, family = row
        minute = to_the_minute(now)
        if self.policy.is_idle(last_used_at, now):
            with self._connection(durable=True) as connection:
                forget_live(connection, digest, family)
            return IdleSession(str(username))
        if last_used_at is None or last_used_at < minute:  # once a minute: a write
            with self._connection(write=True) as connection:
                connection.execute(
                    "UPDATE refresh_tokens SET last_used_at = ? WHERE digest = ?"
                    " AND (last_used_at IS NULL OR last_used_at < ?)",
                    (minute, digest, minute),
                )
        return str(username)

    def describe(self, token: str) -> LiveToken | None:
        now = self.clock()
        with self._connection() as connection:
            row = connection.execute(
                "SELECT username, issued_at, expires_at, last_used_at FROM refresh_tokens"
                " WHERE digest = ? AND retired_at IS NULL"
                " AND (expires_at IS NULL OR expires_at > ?)",
                (token_digest(token), now),
            ).fetchone()
        if row is None or self.policy.is_idle(row[3], now):
            return None
        return LiveToken(str(row[0]), int(row[1]), row[2])

    def rotate(self, token: str, successor: str, username: str | None) -> Rotation:
        policy, digest = self.policy, token_digest(token)
        # durable: a retired token or a family revoked on reuse must stay so
        with self._connection(durable=True) as connection, transaction(connection):
            now = self.clock()  # read holding the write lock: times follow commit order
            if policy.lifetime:
                purge(connection, now, PURGE_BATCH)
            row = connection.execute(
                "SELECT username, family, generation, expires_at, retired_at, lineage,"  # noqa: S608 (constants only)
                f" {SESSION_FIELDS} FROM refresh_tokens WHERE digest = ?",
                (digest,),
            ).fetchone()
            if row is None:
                return _reuse_by_lineage(connection, token, username, now)
            if row[3] is not None and now >= row[3]:
                return Rotation(Outcome.UNKNOWN)
            owner, family, generation, expires_at, retired_at, lineage = row[:6]
            session, logged_in_at, last_used_at, address, user_agent = row[6:]
            if not _owned_by(owner, username):
                return Rotation(Outcome.OTHER_USER)
            idle_since = policy.idle_since(now)
            if (
                retired_at is None
                and idle_since is not None
                and last_used_at is not None
                and last_used_at <= idle_since
            ):
                forget_live(connection, digest, family)
                return Rotation(Outcome.IDLE, owner=owner)
            family, generation = family or digest, generation or 0
            shown = family[:DIGEST_PREFIX_LENGTH]
            if retired_at is None:
                outcome = Outcome.ROTATED
                connection.execute(
                    # the lineage goes with the live token: one row per family carries it
                    "UPDATE refresh_tokens SET retired_at = ?, family = ?, generation = ?,"
                    " lineage = NULL WHERE digest = ?",
                    (now, family, generation, digest),
                )
            else:
                unused = None
                if policy.reuse_grace and now < retired_at + policy.reuse_grace:
                    # this token's own successor, if nothing rotated or replaced it yet: a
                    # sibling's successor (another retry's, rotated since) is not its to retry
                    unused = connection.execute(
                        "SELECT digest FROM refresh_tokens WHERE family = ? AND generation = ?"
                        " AND parent = ? AND retired_at IS NULL",
                        (family, generation + 1, digest),
                    ).fetchone()
                if unused is None:
                    connection.execute("DELETE FROM refresh_tokens WHERE family = ?", (family,))
                    return Rotation(Outcome.REUSED, shown, owner)
                outcome = Outcome.RETRIED
                # retired, not forgotten: whoever presents it later revokes the family
                connection.execute(
                    "UPDATE refresh_tokens SET retired_at = ?, lineage = NULL WHERE digest = ?",
                    (now, *unused),
                )
            if expires_at is None and policy.lifetime:  # a family older than the setting
                expires_at = int(now) + policy.lifetime
                connection.execute(
                    "UPDATE refresh_tokens SET expires_at = ? WHERE family = ?",
                    (expires_at, family),
                )
            connection.execute(
                # numbered, as issue() numbers, only where a limit or a lifetime is set
                "INSERT INTO refresh_tokens (digest, username, issued_at, expires_at, family,"  # noqa: S608 (constants only)
                f" generation, parent, lineage, {SESSION_FIELDS}, sequence) VALUES (?, ?, ?, ?,"
                " ?, ?, ?, ?, ?, ?, ?, ?, ?, CASE WHEN ? THEN (SELECT coalesce(max(sequence), 0)"
                " + 1 FROM refresh_tokens WHERE sequence IS NOT NULL) END)",
                (token_digest(successor), owner, int(now), expires_at, family, generation + 1,
                 digest, lineage or lineage_digest(token), session or new_session_id(),
                 int(now) if logged_in_at is None else logged_in_at, to_the_minute(now),
                 address or "", user_agent or "", bool(policy.per_user or policy.lifetime)),
            )  # fmt: skip
            connection.execute(
                "DELETE FROM refresh_tokens WHERE family = ? AND generation < ?",
                (family, generation + 1 - RETIRED_GENERATIONS_KEPT),
            )
        return Rotation(outcome, shown, owner)

    def revoke(self, token: str) -> Revocation:
        now = self.clock()
        # each statement commits on its own, under the write lock: no transaction needed
        with self._connection(durable=True) as connection:
            # fetchall: a RETURNING statement commits when its last row is read
            rows = connection.execute(
                "DELETE FROM refresh_tokens WHERE digest = ?"
                " RETURNING username, family, retired_at, expires_at",
                (token_digest(token),),
            ).fetchall()
            if rows:
                owner, family, retired_at, expires_at = rows[0]
                if family is None:  # a token never rotated: a family of its own
                    return Revocation(known=True, username=owner)
                connection.execute("DELETE FROM refresh_tokens WHERE family = ?", (family,))
                live_family = expires_at is None or expires_at > now
                return Revocation(
                    True, retired_at is not None and live_family, family[:DIGEST_PREFIX_LENGTH],
                    owner,
                )  # fmt: skip
            lineage = lineage_digest(token)
            if lineage is None:
                return Revocation(known=False)
            # a token the family forgot: its lineage names the family, which ends now (a
            # read first: most unknown tokens name none, and a read takes no write lock)
            found = _live_family_of(connection, lineage, now)
            if found is None:
                return Revocation(known=False)
            family = found[1]
            rows = connection.execute(
                "DELETE FROM refresh_tokens WHERE family = ? RETURNING username", (family,)
            ).fetchall()
        if not rows:  # another process ended the family meanwhile
            return Revocation(known=False)
        return Revocation(True, True, family[:DIGEST_PREFIX_LENGTH], rows[0][0])

    def purge_expired(self, limit: int = PURGE_BATCH) -> int:
        with self._connection(write=True) as connection:
            return purge(connection, self.clock(), limit)

    def tokens_of(self, username: str) -> list[TokenRecord]:
        with self._connection() as connection:
            rows = connection.execute(
                "SELECT digest, issued_at FROM refresh_tokens WHERE username = ?"
                " AND retired_at IS NULL AND (expires_at IS NULL OR expires_at > ?)"
                " ORDER BY issued_at, sequence, digest",
                (username, self.clock()),
            ).fetchall()
        return [TokenRecord.of(digest, username, at) for digest, at in rows]

    def revoke_all(self, username: str) -> int:
        now = self.clock()
        with self._connection(durable=True) as connection:
            # raw columns only: SQLite 3.40 gets `IS NULL` wrong in a WITHOUT ROWID RETURNING
            rows = connection.execute(
                "DELETE FROM refresh_tokens WHERE username = ? RETURNING retired_at, expires_at",
                (username,),
            ).fetchall()
        return sum(
            retired is None and (expires is None or expires > now) for retired, expires in rows
        )

    def sessions_of(self, username: str, limit: int = 50, after: str | None = None) -> SessionPage:
        check_page_limit(limit)
        start = (1 << 62, "") if after is None else parse_session_cursor(after)
        now = self.clock()
        idle_since = self.policy.idle_since(now)
        with self._connection() as connection:
            rows = connection.execute(
                SESSIONS_PAGE,
                (username, start[0], start[0], start[1], now, idle_since, idle_since, limit + 1),
            ).fetchall()
        sessions = [Session(row[0], username, *row[1:]) for row in rows]
        return page_of(sessions, limit)

    def end_session(self, username: str, session_id: str) -> bool:
        if not is_session_id(session_id):
            return False  # no session has that id
        now = self.clock()
        with self._connection(durable=True) as connection, transaction(connection):
            row = connection.execute(
                "SELECT digest, family, last_used_at FROM refresh_tokens"
                " INDEXED BY refresh_tokens_by_session"
                " WHERE username = ? AND retired_at IS NULL AND session = ?"
                " AND (expires_at IS NULL OR expires_at > ?) LIMIT 1",
                (username, session_id, now),
            ).fetchone()
            if row is None:
                return False
            forget_live(connection, row[0], row[1])
        return not self.policy.is_idle(row[2], now)  # an idle one was over, and unlisted

    def log_out_everywhere(self, username: str, at: int) -> int:
        now = self.clock()
        with self._connection(durable=True) as connection, transaction(connection):
            cutoff = _cutoff_of(connection, username)
            if cutoff is not None and cutoff >= at:
                return 0  # done already: a login since then stays
            rows = connection.execute(
                "SELECT digest, family, expires_at FROM refresh_tokens"
                " INDEXED BY refresh_tokens_by_session"
                " WHERE username = ? AND retired_at IS NULL AND logged_in_at <= ?",
                (username, at),
            ).fetchall()
            # a token written by a process still on the schema before sessions (a rolling
            # upgrade) has no login time: its own issue time stands for it
            rows += connection.execute(
                "SELECT digest, family, expires_at FROM refresh_tokens"
                " INDEXED BY refresh_tokens_by_session"
                " WHERE username = ? AND retired_at IS NULL AND logged_in_at IS NULL"
                " AND issued_at <= ?",
                (username, at),
            ).fetchall()
            for digest, family, _ in rows:
                forget_live(connection, digest, family)
            connection.execute(
                "INSERT INTO cutoffs (username, at) VALUES (?, ?)"
                " ON CONFLICT (username) DO UPDATE SET at = max(at, excluded.at)",
                (username, at),
            )
        return sum(expires is None or expires > now for _, _, expires in rows)

    def cutoffs(self, newer_than: int) -> dict[str, int]:
        # A read every SESSION_CUTOFF_REFRESH seconds from whichever thread finds it due:
        # through the process's one write connection, so that it opens no connection of
        # its own in each thread that happens to make it (a thread that only writes, or
        # only checks tokens, has none).
        with self._connection(write=True) as connection:
            rows = connection.execute(
                "SELECT username, at FROM cutoffs WHERE at > ?", (newer_than,)
            ).fetchall()
        return {username: int(at) for username, at in rows}

    def _revoke_digest(self, prefix: str) -> int:
        with self._connection(durable=True) as connection, transaction(connection):
            rows = connection.execute(
                "SELECT digest, family FROM refresh_tokens"
                " WHERE digest >= ? AND digest < ? AND retired_at IS NULL"
                " AND (expires_at IS NULL OR expires_at > ?) LIMIT 2",
                (prefix, prefix + "g", self.clock()),
            ).fetchall()
            if len(rows) != 1:
                return 0
            forget_live(connection, *rows[0])
        return 1

    def deny(self, digest: str, until: float) -> None:
        now = self.clock()
        if until <= now:
            return
        # durable, like a revoke: a logout that answered must not be undone
        with self._connection(durable=True) as connection, transaction(connection):
            connection.execute(  # a bounded batch of expired entries, through the index
                "DELETE FROM denied_tokens WHERE digest IN"
                " (SELECT digest FROM denied_tokens WHERE expires_at <= ? LIMIT ?)",
                (now, PURGE_BATCH),
            )
            connection.execute(
                "INSERT INTO denied_tokens (digest, expires_at) VALUES (?, ?) ON CONFLICT"
                " (digest) DO UPDATE SET expires_at = max(expires_at, excluded.expires_at)",
                (digest, until),
            )

    def is_denied(self, *digests: str) -> bool:
        placeholders = ", ".join("?" * len(digests))  # placeholders only: no value in the text
        query = f"SELECT 1 FROM denied_tokens WHERE expires_at > ? AND digest IN ({placeholders})"  # noqa: S608
        with self._connection() as connection:
            row = connection.execute(query, (self.clock(), *digests)).fetchone()
        return row is not None

    def count(self) -> int:
        with self._connection() as connection:
            (count,) = connection.execute(
                "SELECT count(*) FROM refresh_tokens"
                " WHERE retired_at IS NULL AND (expires_at IS NULL OR expires_at > ?)",
                (self.clock(),),
            ).fetchone()
        return int(count)

    def ping(self) -> None:
        with self._connection() as connection:
            connection.execute("SELECT 1").fetchone()

    def close(self) -> None:
        self._connections.close()
        self._writer.close()

    def export(self) -> Iterator[Record]:
        # a connection of its own, read-only: one read transaction, one moment of the file
        try:
            with contextlib.closing(
                sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=self.timeout)
            ) as connection:
                connection.execute("BEGIN")
                tokens = connection.execute(
                    f"SELECT {EXPORTED} FROM refresh_tokens"  # noqa: S608 (constants only)
                    " ORDER BY retired_at IS NOT NULL, username, issued_at, sequence, digest"
                )
                for row in tokens:
                    yield StoredToken(*row)
                for digest, until in connection.execute(
                    "SELECT digest, expires_at FROM denied_tokens"
                ):
                    yield DenyEntry(digest, until)
                for username, at in connection.execute("SELECT username, at FROM cutoffs"):
                    yield Cutoff(username, at)
                connection.execute("COMMIT")
        except sqlite3.Error as error:
            raise self._unavailable(error) from error

    def import_records(self, records: Iterable[Record]) -> Imported:
        tokens = live = denied = cutoffs = 0
        sessions: dict[str, str] = {}
        for batch in batches(records):
            with self._connection(durable=True) as connection, transaction(connection):
                (sequence,) = connection.execute(
                    "SELECT coalesce(max(sequence), 0) FROM refresh_tokens"
                ).fetchone()
                for record in batch:
                    if isinstance(record, DenyEntry):
                        connection.execute(
                            "INSERT INTO denied_tokens (digest, expires_at) VALUES (?, ?)"
                            " ON CONFLICT (digest) DO UPDATE"
                            " SET expires_at = max(expires_at, excluded.expires_at)",
                            (record.digest, record.until),
                        )
                        denied += 1
                        continue
                    if isinstance(record, Cutoff):
                        connection.execute(
                            "INSERT INTO cutoffs (username, at) VALUES (?, ?) ON CONFLICT"
                            " (username) DO UPDATE SET at = max(at, excluded.at)",
                            (record.username, record.at),
                        )
                        cutoffs += 1
                        continue
                    is_live = record.retired_at is None
                    sequence += is_live  # live ones come in order of issue: number them so
                    written = connection.execute(
                        f"INSERT OR IGNORE INTO refresh_tokens ({EXPORTED}, sequence)"  # noqa: S608
                        f" VALUES ({', '.join('?' * 15)})",
                        (*astuple(record.with_session(sessions)), sequence if is_live else None),
                    ).rowcount
                    tokens += written
                    live += written and is_live
        return Imported(tokens, live, denied, cutoffs)

    def holds_anything(self) -> bool:
        with self._connection() as connection:
            (found,) = connection.execute(
                "SELECT EXISTS (SELECT 1 FROM refresh_tokens)"
                " OR EXISTS (SELECT 1 FROM denied_tokens) OR EXISTS (SELECT 1 FROM cutoffs)"
            ).fetchone()
        return bool(found)

    def is_same_store(self, other: RefreshTokenStore) -> bool:
        # one file by any path (relative, through a symbolic or a hard link); this one
        # exists once pinged. Asked before ``other`` opens it: through a hard link, SQLite
        # would look for a write-ahead log named after the link, and not find this one's.
        if not isinstance(other, SQLiteTokenStore) or not os.path.exists(other.path):
            return False
        try:
            return os.path.samefile(self.path, other.path)
        except OSError as error:
            raise self._unavailable(error) from error

    @contextmanager
    def _connection(
        self, *, write: bool = False, durable: bool = False
    ) -> Iterator[sqlite3.Connection]:
        """Yield this thread's connection to read, or the process's to ``write``;
        ``durable`` (a write): commit with ``synchronous = FULL``."""
        try:
            if not (write or durable):
                yield self._open()
                return
            with self._writer.connection() as connection:
                if not durable or self.strict:  # strict connections are FULL throughout
                    yield connection
                    return
                connection.execute("PRAGMA synchronous = FULL")
                try:
                    yield connection
                finally:
                    connection.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as error:
            raise self._unavailable(error) from error

    def _unavailable(self, error: BaseException) -> BackendUnavailable:
        return BackendUnavailable(f"SQLite store {self.path}: {error_text(error)}")

    def _open(self) -> sqlite3.Connection:
        return self._connections.get()

    def _connect(self) -> sqlite3.Connection:
        # NORMAL (in WAL mode): commits survive any process crash; revokes switch to FULL.
        return connect_wal(
            self.path, self.timeout, "FULL" if self.strict else "NORMAL", self._create_schema
        )

    def _create_schema(self, connection: sqlite3.Connection) -> None:
        create_schema(connection, username_index=bool(self.policy.per_user))


def _cutoff_of(connection: sqlite3.Connection, username: str) -> int | None:
    """Return the cut-off of ``username``, or None."""
    row = connection.execute("SELECT at FROM cutoffs WHERE username = ?", (username,)).fetchone()
    return None if row is None else int(row[0])


def _owned_by(owner: str, username: str | None) -> bool:
    """Return whether a token of ``owner`` may be rotated for ``username`` (None: anyone's)."""
    return username is None or hmac.compare_digest(owner.encode(), username.encode())


def _reuse_by_lineage(
    connection: sqlite3.Connection, token: str, username: str | None, now: float
) -> Rotation:
    """Answer a token whose digest is unknown: reuse, if its lineage names a live family
    of ``username`` (None: anyone's; a token the family forgot), which is then revoked;
    else unknown."""
    lineage = lineage_digest(token)
    if lineage is None:
        return Rotation(Outcome.UNKNOWN)
    row = _live_family_of(connection, lineage, now)
    if row is None:
        return Rotation(Outcome.UNKNOWN)
    owner, family = row
    if not _owned_by(owner, username):
        return Rotation(Outcome.OTHER_USER)
    connection.execute("DELETE FROM refresh_tokens WHERE family = ?", (family,))
    return Rotation(Outcome.REUSED, family[:DIGEST_PREFIX_LENGTH], owner)


def _live_family_of(
    connection: sqlite3.Connection, lineage: str, now: float
) -> tuple[str, str] | None:
    """Return the username and family of the live family whose lineage digest is
    ``lineage``, or None."""
    row = connection.execute(
        "SELECT username, family FROM refresh_tokens"
        " WHERE lineage = ? AND (expires_at IS NULL OR expires_at > ?) LIMIT 1",
        (lineage, now),
    ).fetchone()
    return None if row is None else (row[0], row[1])
