"""The SQLite store's tables: their schema, its numbered versions (``PRAGMA user_version``)
and the migration of files an older version made, and the statements that several
operations share."""

from __future__ import annotations

import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

#: The columns of refresh_tokens. ``expires_at``: NULL, valid until revoked. ``family``:
#: the digest of the family's first token, NULL for a token never rotated (a family of its
#: own); ``generation``: 0 for a login, +1 per rotation; ``retired_at``: when it was
#: rotated, NULL while live; ``parent``: the digest of the token whose rotation made it,
#: NULL for a login (and for a successor made before the column: a retry then finds no
#: unused successor, and is reuse); ``sequence``: the order of issue, so that same-second
#: tokens are told apart exactly, set under a per-user limit or a lifetime (and by an
#: import); NULL without either (SPEC.md's defaults' one INSERT, where nothing is evicted)
#: and in older rows, which sort first in a second. ``lineage``: on a family's live
#: successor only, the digest of the family's lineage (interface.LINEAGE_LENGTH), by which
#: a token the family forgot is still known as its own; NULL on a login, on a retired
#: token, and on a successor made before the column (its family gets one at its next
#: rotation).
COLUMNS = {
    "digest": "TEXT PRIMARY KEY",
    "username": "TEXT NOT NULL",
    "issued_at": "INTEGER NOT NULL",
    "expires_at": "INTEGER",
    "family": "TEXT",
    "generation": "INTEGER",
    "retired_at": "REAL",
    "parent": "TEXT",
    "sequence": "INTEGER",
    "lineage": "TEXT",
}
#: Partial indexes: a token without expiry or family (SPEC.md's defaults) adds nothing.
INDEXES = (
    "CREATE INDEX IF NOT EXISTS refresh_tokens_by_expiry"
    " ON refresh_tokens (expires_at) WHERE expires_at IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS refresh_tokens_by_family"
    " ON refresh_tokens (family, generation) WHERE family IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS refresh_tokens_by_sequence"
    " ON refresh_tokens (sequence) WHERE sequence IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS refresh_tokens_by_lineage"
    " ON refresh_tokens (lineage) WHERE lineage IS NOT NULL",
)
#: Signed tokens refused until they expire (a logged-out cookie token), by digest.
DENIED_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS denied_tokens"
    " (digest TEXT PRIMARY KEY, expires_at REAL NOT NULL) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS denied_tokens_by_expiry ON denied_tokens (expires_at)",
)
#: Only the per-user limit needs a user's tokens on every login: this index is made when
#: the limit is set, and kept after (another process may have the limit set). Without
#: it each login writes one page less, and
#: ``flask tokens list`` and ``revoke-user`` scan the table.
USERNAME_INDEX = (
    "CREATE INDEX IF NOT EXISTS refresh_tokens_by_username ON refresh_tokens (username, issued_at)"
)


def create_schema(connection: sqlite3.Connection, *, username_index: bool) -> None:
    """Bring the file to ``SCHEMA_VERSION`` (a new one from nothing), keeping every row.

    ``username_index``: make the index that the per-user limit reads on every login.
    """
    migrate(connection, STEPS)
    if username_index:
        connection.execute(USERNAME_INDEX)


def migrate(
    connection: sqlite3.Connection, steps: Sequence[Callable[[sqlite3.Connection], None]]
) -> None:
    """Run the ``steps`` a file has not had, in order, in one write transaction, and
    record its version (``PRAGMA user_version``). The version is read again under the
    write lock: of processes opening a file together, one migrates, and the others then
    find it done. A file at a newer version than ``steps`` knows is left as it is."""
    if _version(connection) >= len(steps):
        return
    with transaction(connection):
        version = _version(connection)
        for step in steps[version:]:
            step(connection)
        if version < len(steps):
            connection.execute(f"PRAGMA user_version = {len(steps)}")


def _version(connection: sqlite3.Connection) -> int:
    (version,) = connection.execute("PRAGMA user_version").fetchone()
    return int(version)


def _version_1(connection: sqlite3.Connection) -> None:
    """The tables as versions began: a new file gets them whole; a file from before
    versions (no user_version) has refresh_tokens with any earlier set of columns, and
    gains each one it lacks."""
    columns = ", ".join(f"{name} {kind}" for name, kind in COLUMNS.items())
    connection.execute(f"CREATE TABLE IF NOT EXISTS refresh_tokens ({columns}) WITHOUT ROWID")
    present = {row[1] for row in connection.execute("PRAGMA table_info(refresh_tokens)")}
    for name, kind in COLUMNS.items():
        if name not in present:
            connection.execute(f"ALTER TABLE refresh_tokens ADD COLUMN {name} {kind}")
    for statement in (*INDEXES, *DENIED_SCHEMA):
        connection.execute(statement)


#: The columns of a token's session (version 2), which every token of a family carries:
#: ``session``, its id; ``logged_in_at``, the login's second; ``last_used_at``, the
#: minute of its last use; ``address`` and ``user_agent``, the client seen at login.
SESSION_COLUMNS = {
    "session": "TEXT",
    "logged_in_at": "INTEGER",
    "last_used_at": "INTEGER",
    "address": "TEXT",
    "user_agent": "TEXT",
}
#: A user's live sessions, newest login first, ties by id: ``sessions_of``'s keyset pages
#: and ``log_out_everywhere`` read one user's entries only, however many tokens others hold.
SESSION_INDEX = (
    "CREATE INDEX IF NOT EXISTS refresh_tokens_by_session ON refresh_tokens"
    " (username, logged_in_at DESC, session) WHERE retired_at IS NULL"
)
#: Each user's cut-off: access tokens issued at or before ``at`` are refused.
CUTOFF_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS cutoffs"
    " (username TEXT PRIMARY KEY, at INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS cutoffs_by_time ON cutoffs (at)",
)


def _version_2(connection: sqlite3.Connection) -> None:
    """Sessions and cut-offs. A token from before becomes a session of a new id (one per
    family), logged in at its family's first issue, its client unknown, last used at the
    upgrade: its real last use was never kept, and an idle timeout turned on with the
    upgrade must not end the sessions in use."""
    upgraded_at = int(time.time()) // 60 * 60
    present = {row[1] for row in connection.execute("PRAGMA table_info(refresh_tokens)")}
    for name, kind in SESSION_COLUMNS.items():
        if name not in present:
            connection.execute(f"ALTER TABLE refresh_tokens ADD COLUMN {name} {kind}")
    # a token never rotated is a family of its own, found by digest; a family by its index
    for column, where in (("digest", "family IS NULL"), ("family", "family IS NOT NULL")):
        families = connection.execute(
            f"SELECT {column}, min(issued_at) FROM refresh_tokens"  # noqa: S608 (constants)
            f" WHERE session IS NULL AND {where} GROUP BY {column}"
        ).fetchall()
        for key, logged_in_at in families:
            connection.execute(
                "UPDATE refresh_tokens SET session = ?, logged_in_at = ?, last_used_at = ?,"  # noqa: S608
                f" address = '', user_agent = '' WHERE {column} = ?",
                (secrets.token_urlsafe(16), logged_in_at, upgraded_at, key),
            )
    for statement in (SESSION_INDEX, *CUTOFF_SCHEMA):
        connection.execute(statement)


#: The store file's steps, one per version, kept in its ``PRAGMA user_version``: ``STEPS[n]``
#: brings a file from version ``n`` to ``n + 1``. A later change of the schema is a new step.
STEPS: tuple[Callable[[sqlite3.Connection], None], ...] = (_version_1, _version_2)
#: The version of the schema this code makes.
SCHEMA_VERSION = len(STEPS)


@contextmanager
def transaction(connection: sqlite3.Connection) -> Iterator[None]:
    """Run the block in one write transaction, taken at once: commit, or roll back on error."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def purge(connection: sqlite3.Connection, now: float, limit: int) -> int:
    """Forget up to ``limit`` expired tokens, found through the expiry index."""
    cursor = connection.execute(
        "DELETE FROM refresh_tokens WHERE digest IN"
        " (SELECT digest FROM refresh_tokens WHERE expires_at <= ? LIMIT ?)",
        (now, limit),
    )
    return cursor.rowcount


def forget_live(connection: sqlite3.Connection, digest: str, family: str | None) -> None:
    """Forget a live token, and with it its family's retired tokens."""
    if family is None:
        connection.execute("DELETE FROM refresh_tokens WHERE digest = ?", (digest,))
    else:
        connection.execute("DELETE FROM refresh_tokens WHERE family = ?", (family,))
