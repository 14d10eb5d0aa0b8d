"""What only the SQLite store has: its schema's migration and the indexes its queries use."""

from __future__ import annotations

import contextlib
import multiprocessing
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from app.auth.tokens import new_refresh_token
from app.backends.interface import (
    BackendUnavailable,
    Outcome,
    RefreshTokenPolicy,
    successor_of,
    token_digest,
)
from app.backends.sqlite.files import ProcessWriter, connect_wal
from app.backends.sqlite.store import SESSIONS_PAGE, SQLiteTokenStore
from app.backends.sqlite.tables import SCHEMA_VERSION, SESSION_COLUMNS
from tests.helpers.clock import ManualClock
from tests.helpers.stores import open_store

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


def test_a_token_written_without_a_login_time_is_logged_out_everywhere_too(path):
    # a process still on the schema before sessions (a rolling restart) writes none
    store = open_store(f"sqlite:///{path}", timeout=2)
    token = new_refresh_token()
    store.issue(token, "alice")
    with contextlib.closing(sqlite3.connect(path)) as database:
        database.execute("UPDATE refresh_tokens SET logged_in_at = NULL")
        database.commit()
    assert store.log_out_everywhere("alice", int(time.time()) + 1) == 1
    assert store.owner_of(token) is None


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
        "digest", "username", "issued_at", "expires_at", "family", "generation", "retired_at",
        "parent", "sequence", "lineage", *SESSION_COLUMNS,
    ]  # fmt: skip
    successor = new_refresh_token()
    assert store.rotate(old, successor, "alice").outcome is Outcome.ROTATED
    assert store.owner_of(successor) == "alice"
    assert store.rotate(old, new_refresh_token(), "alice").outcome is Outcome.REUSED
    store.close()
    again = open_store(f"sqlite:///{path}", timeout=2)  # a migrated file opens as it is
    assert again.count() == 0
    again.close()


#: The schema before tokens recorded their parent and order of issue.
ROTATION_SCHEMA = """
CREATE TABLE refresh_tokens (
    digest     TEXT PRIMARY KEY,
    username   TEXT NOT NULL,
    issued_at  INTEGER NOT NULL,
    expires_at INTEGER,
    family     TEXT,
    generation INTEGER,
    retired_at REAL
) WITHOUT ROWID;
CREATE INDEX refresh_tokens_by_family
    ON refresh_tokens (family, generation) WHERE family IS NOT NULL;
"""


def test_a_file_of_the_rotation_schema_is_migrated_and_its_successors_have_no_parent(path):
    # a token rotated by the older schema: its successor names no parent, so a retry of
    # the retired token within the grace finds no successor of its own, and is reuse
    first, second, other = new_refresh_token(), new_refresh_token(), new_refresh_token()
    now = time.time()
    with contextlib.closing(sqlite3.connect(path)) as database:
        database.executescript(ROTATION_SCHEMA)
        database.executemany(
            "INSERT INTO refresh_tokens VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (token_digest(first), "alice", int(now), None, token_digest(first), 0, now),
                (token_digest(second), "alice", int(now), None, token_digest(first), 1, None),
                (token_digest(other), "alice", int(now), None, None, None, None),
            ],
        )
        database.commit()
    store = open_store(
        f"sqlite:///{path}", timeout=2, policy=RefreshTokenPolicy(reuse_grace=5, per_user=3)
    )
    assert store.owner_of(second) == "alice"
    assert columns(path)[-8:-5] == ["parent", "sequence", "lineage"]
    assert {"refresh_tokens_by_sequence", "refresh_tokens_by_lineage"} <= indexes(path)
    assert store.rotate(first, new_refresh_token(), "alice").outcome is Outcome.REUSED
    assert store.owner_of(second) is None
    newer = [new_refresh_token() for _ in range(3)]
    for token in newer:  # same second as the older row: it is the oldest, and goes first
        store.issue(token, "alice")
    assert [store.owner_of(token) for token in [other, *newer]] == [None] + ["alice"] * 3
    store.close()


LATER_COLUMNS = {
    "expires_at": "INTEGER", "family": "TEXT", "generation": "INTEGER", "retired_at": "REAL",
    "parent": "TEXT", "sequence": "INTEGER", "lineage": "TEXT",
}  # fmt: skip


def user_version(path: str) -> int:
    with contextlib.closing(sqlite3.connect(path)) as database:
        return int(database.execute("PRAGMA user_version").fetchone()[0])


@pytest.mark.parametrize(
    "kept",
    [(), ("expires_at",), ("expires_at", "family", "generation", "retired_at", "parent"),
     ("lineage",), ("sequence", "parent"), tuple(LATER_COLUMNS)],
)  # fmt: skip
def test_a_file_from_before_versions_with_any_earlier_columns_is_brought_to_the_version(
    tmp_path, kept
):
    path = str(tmp_path / "old.sqlite3")
    token = new_refresh_token()
    with contextlib.closing(sqlite3.connect(path)) as database:
        later = "".join(f", {name} {LATER_COLUMNS[name]}" for name in kept)
        database.execute(
            "CREATE TABLE refresh_tokens (digest TEXT PRIMARY KEY, username TEXT NOT NULL,"
            f" issued_at INTEGER NOT NULL{later}) WITHOUT ROWID"
        )
        database.execute(
            "INSERT INTO refresh_tokens (digest, username, issued_at) VALUES (?, ?, ?)",
            (token_digest(token), "alice", int(time.time())),
        )
        database.commit()
    assert user_version(path) == 0  # no version: made before versions
    store = open_store(f"sqlite:///{path}", timeout=2, policy=RefreshTokenPolicy(per_user=2))
    assert store.owner_of(token) == "alice"
    assert sorted(columns(path)) == sorted(
        ["digest", "username", "issued_at", *LATER_COLUMNS, *SESSION_COLUMNS]
    )
    assert user_version(path) == SCHEMA_VERSION
    assert {"denied_tokens_by_expiry", "refresh_tokens_by_lineage"} <= indexes(path)
    successor = successor_of(token)
    assert store.rotate(token, successor, "alice").outcome is Outcome.ROTATED
    assert store.rotate(token, successor_of(token), "alice").outcome is Outcome.REUSED
    store.close()


def test_a_file_at_a_newer_version_is_left_as_it_is(path):
    with contextlib.closing(sqlite3.connect(path)) as database:
        database.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        database.execute(
            "CREATE TABLE refresh_tokens (digest TEXT PRIMARY KEY, username TEXT NOT NULL,"
            " issued_at INTEGER NOT NULL, retired_at REAL, expires_at INTEGER, newer TEXT)"
        )
    store = open_store(f"sqlite:///{path}", timeout=2)
    store.ping()
    assert "newer" in columns(path)
    assert "lineage" not in columns(path)
    assert user_version(path) == SCHEMA_VERSION + 1
    store.close()


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


def indexes(path: str) -> set[str]:
    with contextlib.closing(sqlite3.connect(path)) as database:
        rows = database.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
        return {name for (name,) in rows if not name.startswith("sqlite_")}


def test_the_username_index_is_made_for_the_per_user_limit_and_then_kept(path):
    store = open_store(f"sqlite:///{path}", timeout=2)
    store.issue(new_refresh_token(), "alice")
    store.close()
    assert "refresh_tokens_by_username" not in indexes(path)  # a login writes one page less
    limited = open_store(f"sqlite:///{path}", timeout=2, policy=RefreshTokenPolicy(per_user=1))
    limited.issue(new_refresh_token(), "alice")
    assert "refresh_tokens_by_username" in indexes(path)
    assert len(limited.tokens_of("alice")) == 1  # the token from before the limit counted
    limited.close()
    again = open_store(f"sqlite:///{path}", timeout=2)  # another process may have the limit
    again.ping()
    again.close()
    assert "refresh_tokens_by_username" in indexes(path)


def test_the_per_user_limit_finds_a_users_tokens_through_its_index(path):
    store = SQLiteTokenStore(path, timeout=2, policy=RefreshTokenPolicy(per_user=3))
    store.ping()
    live = query_plan(
        store,
        "SELECT digest, family FROM refresh_tokens WHERE username = ? AND retired_at IS NULL"
        " AND (expires_at IS NULL OR expires_at > ?) ORDER BY issued_at, sequence, digest",
        "alice",
        time.time(),
    )
    assert "refresh_tokens_by_username" in live
    assert "SCAN" not in live
    store.close()


@pytest.mark.parametrize("per_user", [0, 2])
def test_a_users_tokens_are_listed_and_revoked_with_or_without_the_index(path, per_user):
    store = SQLiteTokenStore(path, timeout=2, policy=RefreshTokenPolicy(per_user=per_user))
    for username in ["alice", "bob", "alice", "carol", "alice"]:
        store.issue(new_refresh_token(), username)
    assert len(store.tokens_of("alice")) == (2 if per_user else 3)
    assert store.revoke_all("alice") == (2 if per_user else 3)
    assert store.tokens_of("alice") == []
    assert [record.username for record in store.tokens_of("bob")] == ["bob"]
    assert store.count() == 2
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


# --- writes: one connection per process, taken in turn ----------------------------------


def impatient_connection(path: str) -> sqlite3.Connection:
    """A WAL connection that never waits in SQLite's busy handler: a locked file fails."""
    return connect_wal(path, 0, "NORMAL", lambda c: c.execute(
        "CREATE TABLE IF NOT EXISTS t (n INTEGER)"))  # fmt: skip


def test_the_threads_of_a_process_write_in_turn_not_in_sqlites_busy_handler(path):
    writer = ProcessWriter(lambda: impatient_connection(path), timeout=10)
    start = threading.Barrier(8, timeout=10)

    def write(thread: int) -> None:
        start.wait()
        for n in range(50):
            with writer.connection() as connection:
                connection.execute("BEGIN IMMEDIATE")  # fails at once if another holds it
                connection.execute("INSERT INTO t VALUES (?)", (thread * 100 + n,))
                connection.execute("COMMIT")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(write, range(8)))
    with writer.connection() as connection:
        assert connection.execute("SELECT count(*) FROM t").fetchone() == (400,)
    writer.close()


def test_per_thread_connections_would_have_failed_there(path):
    """The test above can fail: two threads' own connections meet in SQLite's lock."""
    holder, other = impatient_connection(path), impatient_connection(path)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO t VALUES (1)")
    failures = []

    def write() -> None:
        try:
            other.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            failures.append(str(error))

    thread = threading.Thread(target=write)
    thread.start()
    thread.join(timeout=10)
    holder.execute("COMMIT")
    holder.close()
    other.close()
    assert failures == ["database is locked"]


def test_a_write_waiting_longer_than_the_timeout_is_503_not_a_hang(path):
    store = SQLiteTokenStore(path, timeout=0.2)
    store.issue(new_refresh_token(), "alice")
    # another thread's long write holds the process's turn
    with store._writer.connection(), ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(store.issue, new_refresh_token(), "bob")
        with pytest.raises(BackendUnavailable, match="database is locked"):
            waiting.result(timeout=10)
    store.issue(new_refresh_token(), "bob")  # free again
    assert store.count() == 2
    store.close()


def _write_in_child(store: SQLiteTokenStore, results) -> None:
    token = new_refresh_token()
    store.issue(token, "child")
    results.put(token)


def test_a_child_forked_while_its_parent_writes_has_a_free_turn(path):
    store = SQLiteTokenStore(path, timeout=5)
    store.issue(new_refresh_token(), "parent")
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    with store._writer.connection():  # held by the parent at fork time
        child = context.Process(target=_write_in_child, args=(store, results))
        child.start()
        token = results.get(timeout=20)
        child.join(20)
    assert child.exitcode == 0
    assert store.owner_of(token) == "child"
    store.close()


def test_expired_deny_entries_are_purged_by_the_next_deny_through_their_index(path):
    clock = ManualClock(time.time())
    now = clock()
    store = SQLiteTokenStore(path, timeout=2, clock=clock)
    for n in range(3):
        store.deny(token_digest(f"cookie token {n}"), now + 10)
    clock.advance(10)
    store.deny(token_digest("a later one"), now + 70)
    with contextlib.closing(sqlite3.connect(path)) as database:
        assert database.execute("SELECT digest FROM denied_tokens").fetchall() == [
            (token_digest("a later one"),)
        ]
    purge = query_plan(
        store, "SELECT digest FROM denied_tokens WHERE expires_at <= ? LIMIT ?", now, 16
    )
    assert "denied_tokens_by_expiry" in purge
    store.close()


def test_a_file_of_version_1_is_migrated_and_its_tokens_become_sessions(path):
    with contextlib.closing(sqlite3.connect(path)) as database:
        database.execute("PRAGMA user_version = 0")
    store = open_store(f"sqlite:///{path}", timeout=2)
    first, other = new_refresh_token(), new_refresh_token()
    store.issue(first, "alice")
    store.issue(other, "alice")
    store.rotate(first, successor := successor_of(first), "alice")
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as database, database:
        # as version 1 left it: no session columns' values, no cut-offs
        database.execute(
            "UPDATE refresh_tokens SET session = NULL, logged_in_at = NULL, last_used_at = NULL,"
            " address = NULL, user_agent = NULL, issued_at = issued_at - 86400"
        )
        database.execute("DROP TABLE cutoffs")
        database.execute("PRAGMA user_version = 1")
    upgraded = int(time.time()) // 60 * 60
    store = open_store(f"sqlite:///{path}", timeout=2)
    sessions = store.sessions_of("alice").sessions
    assert user_version(path) == SCHEMA_VERSION
    # logged in a day ago; last used, as far as anyone knows, at the upgrade
    assert all(s.logged_in_at < upgraded - 3600 <= upgraded <= s.last_used_at for s in sessions)
    assert len({session.id for session in sessions}) == 2
    assert all(session.address == session.user_agent == "" for session in sessions)
    with contextlib.closing(sqlite3.connect(path)) as database:
        (families,) = database.execute(
            "SELECT count(DISTINCT session) FROM refresh_tokens WHERE family IS NOT NULL"
        ).fetchone()
    assert families == 1  # the retired token and its successor: one session
    assert store.log_out_everywhere("alice", int(time.time())) == 2
    assert store.owner_of(successor) is None
    store.close()


def test_a_users_sessions_are_read_through_the_index_by_username_without_a_sort(path):
    store = open_store(f"sqlite:///{path}", timeout=2)
    store.issue(new_refresh_token(), "alice")
    with contextlib.closing(sqlite3.connect(path)) as database:
        plan = database.execute(
            f"EXPLAIN QUERY PLAN {SESSIONS_PAGE}", ("alice", 1, 1, "", 0, None, None, 51)
        ).fetchall()
    text = " ".join(str(row[-1]) for row in plan)
    assert "USING INDEX refresh_tokens_by_session (username=? AND logged_in_at<?)" in text
    assert "TEMP B-TREE" not in text  # the index's order is the page's
    store.close()
