"""The SQLite store's tables: their schema, the migration of files an older schema made,
and the statements that several operations share."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

SCHEMA = """
CREATE TABLE IF NOT EXISTS refresh_tokens (
    digest     TEXT PRIMARY KEY,
    username   TEXT NOT NULL,
    issued_at  INTEGER NOT NULL,
    expires_at INTEGER,
    family     TEXT,
    generation INTEGER,
    retired_at REAL,
    parent     TEXT,
    sequence   INTEGER,
    lineage    TEXT
) WITHOUT ROWID;
"""
#: Columns added since the first schema: ALTER TABLE adds each one a file lacks.
#: ``expires_at``: NULL, valid until revoked. ``family``: the digest of the family's
#: first token, NULL for a token never rotated (a family of its own); ``generation``:
#: 0 for a login, +1 per rotation; ``retired_at``: when it was rotated, NULL while live;
#: ``parent``: the digest of the token whose rotation made it, NULL for a login (and for a
#: successor made before the column: a retry then finds no unused successor, and is reuse);
#: ``sequence``: the order of issue, so that same-second tokens are told apart exactly,
#: set under a per-user limit or a lifetime; NULL without either (SPEC.md's defaults'
#: one INSERT, where nothing is evicted) and in older rows, which sort first in a second.
#: ``lineage``: on a family's live successor only, the digest of the family's lineage
#: (base.LINEAGE_LENGTH), by which a token the family forgot is still known as its own;
#: NULL on a login, on a retired token, and on a successor made before the column (its
#: family gets one at its next rotation).
ADDED_COLUMNS = {
    "expires_at": "INTEGER",
    "family": "TEXT",
    "generation": "INTEGER",
    "retired_at": "REAL",
    "parent": "TEXT",
    "sequence": "INTEGER",
    "lineage": "TEXT",
}
#: Partial indexes: a token without expiry or family (SPEC.md's defaults) adds nothing.
INDEXES = """
CREATE INDEX IF NOT EXISTS refresh_tokens_by_expiry
    ON refresh_tokens (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS refresh_tokens_by_family
    ON refresh_tokens (family, generation) WHERE family IS NOT NULL;
CREATE INDEX IF NOT EXISTS refresh_tokens_by_sequence
    ON refresh_tokens (sequence) WHERE sequence IS NOT NULL;
CREATE INDEX IF NOT EXISTS refresh_tokens_by_lineage
    ON refresh_tokens (lineage) WHERE lineage IS NOT NULL;
"""
#: Signed tokens refused until they expire (a logged-out cookie token), by digest.
DENIED_SCHEMA = """
CREATE TABLE IF NOT EXISTS denied_tokens (
    digest     TEXT PRIMARY KEY,
    expires_at REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS denied_tokens_by_expiry ON denied_tokens (expires_at);
"""
#: Only the per-user limit needs a user's tokens on every login: this index is made when
#: the limit is set, and kept after (another process may have the limit set). Without
#: it each login writes one page less (docs/performance.md has the measure), and
#: ``flask tokens list`` and ``revoke-user`` scan the table.
USERNAME_INDEX = (
    "CREATE INDEX IF NOT EXISTS refresh_tokens_by_username ON refresh_tokens (username, issued_at)"
)


def create_schema(connection: sqlite3.Connection, *, username_index: bool) -> None:
    """Create the tables and indexes a file lacks, and migrate one an older schema made.

    ``username_index``: make the index that the per-user limit reads on every login.
    """
    connection.executescript(SCHEMA)
    _migrate(connection)
    connection.executescript(DENIED_SCHEMA)
    if username_index:
        connection.execute(USERNAME_INDEX)


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


def _migrate(connection: sqlite3.Connection) -> None:
    """Add the columns and indexes that a file made by an older schema lacks."""
    if _missing_columns(connection):
        with transaction(connection):  # one process alters; the others then find nothing
            for column in _missing_columns(connection):
                kind = ADDED_COLUMNS[column]
                connection.execute(f"ALTER TABLE refresh_tokens ADD COLUMN {column} {kind}")
    connection.executescript(INDEXES)


def _missing_columns(connection: sqlite3.Connection) -> list[str]:
    present = {row[1] for row in connection.execute("PRAGMA table_info(refresh_tokens)")}
    return [column for column in ADDED_COLUMNS if column not in present]
