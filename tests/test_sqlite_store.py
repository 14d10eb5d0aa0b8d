"""What only the SQLite store has: its schema's migration and the indexes its queries use."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from app.store import Outcome, RefreshTokenPolicy, open_store, token_digest
from app.store.sqlite import SQLiteTokenStore
from app.tokens import new_refresh_token

#: The schema of the first release, as files made by it hold it.
FIRST_SCHEMA = """
CREATE TABLE refresh_tokens (
    digest    TEXT PRIMARY KEY,
    username  TEXT NOT NULL,
    issued_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX refresh_tokens_by_username ON refresh_tokens (username, issued_at);
"""


@pytest.fixture
def path(tmp_path) -> str:
    return str(tmp_path / "refresh_tokens.sqlite3")


def columns(path: str) -> list[str]:
    with contextlib.closing(sqlite3.connect(path)) as database:
        return [row[1] for row in database.execute("PRAGMA table_info(refresh_tokens)")]


def test_a_file_of_the_first_schema_is_migrated_and_keeps_its_tokens(path):
    old = new_refresh_token()
    with contextlib.closing(sqlite3.connect(path)) as database:
        database.executescript(FIRST_SCHEMA)
        database.execute(
            "INSERT INTO refresh_tokens VALUES (?, ?, ?)",
            (token_digest(old), "alice", int(time.time())),
        )
        database.commit()
    store = open_store(f"sqlite:///{path}", timeout=2, policy=RefreshTokenPolicy(lifetime=60))
    assert store.owner_of(old) == "alice"
    assert columns(path) == [
        "digest", "username", "issued_at", "expires_at", "family", "generation", "retired_at"
    ]  # fmt: skip
    successor = new_refresh_token()
    assert store.rotate(old, successor, "alice").outcome is Outcome.ROTATED
    assert store.owner_of(successor) == "alice"
    assert store.rotate(old, new_refresh_token(), "alice").outcome is Outcome.REUSED
    store.close()
    again = open_store(f"sqlite:///{path}", timeout=2)  # a migrated file opens as it is
    assert again.count() == 0
    again.close()


def test_workers_opening_a_first_schema_file_together_all_open_it_migrated(path):
    with contextlib.closing(sqlite3.connect(path)) as database:
        database.executescript(FIRST_SCHEMA)
    stores = [SQLiteTokenStore(path, timeout=5) for _ in range(6)]
    start = threading.Barrier(len(stores), timeout=30)

    def open_together(store: SQLiteTokenStore) -> None:
        start.wait()
        store.ping()

    with ThreadPoolExecutor(len(stores)) as pool:
        list(pool.map(open_together, stores))
    assert "retired_at" in columns(path)
    for store in stores:
        assert store.owner_of(new_refresh_token()) is None  # the new columns answer
        store.close()


def query_plan(store: SQLiteTokenStore, sql: str, *parameters: object) -> str:
    connection = store._open()
    rows = connection.execute("EXPLAIN QUERY PLAN " + sql, parameters).fetchall()
    return " | ".join(row[-1] for row in rows)


def test_purge_and_family_look_ups_go_through_their_indexes(path):
    store = SQLiteTokenStore(path, timeout=2)
    store.ping()
    purge = query_plan(
        store,
        "DELETE FROM refresh_tokens WHERE digest IN"
        " (SELECT digest FROM refresh_tokens WHERE expires_at <= ? LIMIT ?)",
        time.time(),
        16,
    )
    assert "refresh_tokens_by_expiry" in purge
    family = query_plan(store, "DELETE FROM refresh_tokens WHERE family = ?", "f" * 64)
    assert "refresh_tokens_by_family" in family
    assert "SCAN" not in purge + family
    store.close()


def test_spec_defaults_leave_the_new_columns_empty_so_the_partial_indexes_too(path):
    store = open_store(f"sqlite:///{path}", timeout=2)
    store.issue(new_refresh_token(), "alice")
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as database:
        row = database.execute(
            "SELECT expires_at, family, generation, retired_at FROM refresh_tokens"
        ).fetchone()
    assert row == (None, None, None, None)  # outside `WHERE ... IS NOT NULL` of both indexes
