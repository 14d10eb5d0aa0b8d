"""The SQLite files (token store, rate-limit counters) are 0600 from their first byte."""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
from pathlib import Path

import pytest

from app.backends.sqlite.files import connect_wal, create_private_file

pytestmark = pytest.mark.store("sqlite")


@pytest.fixture(params=[0o000, 0o022, 0o077], ids=["umask-000", "umask-022", "umask-077"])
def umask(request):
    """Run the test under this umask (0o000: the most permissive), restored after."""
    previous = os.umask(request.param)
    yield request.param
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def schema(connection: sqlite3.Connection) -> None:
    connection.execute("CREATE TABLE IF NOT EXISTS t (x)")


def test_the_database_and_its_wal_and_shm_are_created_0600(tmp_path, umask, monkeypatch):
    path = tmp_path / "store.sqlite3"
    seen: dict[str, int] = {}
    # the modes SQLite finds when it opens the file: before any chmod of ours could run
    original_connect = sqlite3.connect

    def connect(*args, **kwargs):
        seen["main before sqlite"] = mode(path)
        return original_connect(*args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", connect)
    connection = connect_wal(str(path), 1.0, "NORMAL", schema)
    monkeypatch.undo()
    try:
        connection.execute("INSERT INTO t VALUES (1)")
        assert seen["main before sqlite"] == 0o600
        for name in ("store.sqlite3", "store.sqlite3-wal", "store.sqlite3-shm"):
            assert mode(tmp_path / name) == 0o600, name
    finally:
        connection.close()


def test_sqlite_makes_wal_and_shm_with_the_main_files_mode_under_umask_0(tmp_path, umask):
    # what the fix relies on, checked without any chmod of ours
    path = tmp_path / "bare.sqlite3"
    create_private_file(str(path))
    connection = sqlite3.connect(str(path), isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("CREATE TABLE t (x)")
        assert mode(tmp_path / "bare.sqlite3-wal") == 0o600
        assert mode(tmp_path / "bare.sqlite3-shm") == 0o600
    finally:
        connection.close()


def test_sqlite_alone_would_create_the_file_0644_under_umask_0(tmp_path):
    # why the file is created first: without it, the database is readable by all
    previous = os.umask(0)
    try:
        connection = sqlite3.connect(str(tmp_path / "plain.sqlite3"))
        connection.execute("CREATE TABLE t (x)")
        connection.close()
    finally:
        os.umask(previous)
    assert mode(tmp_path / "plain.sqlite3") == 0o644


def test_an_existing_file_is_left_as_it_is_then_made_0600(tmp_path):
    path = tmp_path / "old.sqlite3"
    path.write_bytes(b"")
    path.chmod(0o644)
    create_private_file(str(path))
    assert mode(path) == 0o644  # never truncated nor replaced
    connect_wal(str(path), 1.0, "NORMAL", schema).close()
    assert mode(path) == 0o600


def test_workers_creating_the_file_together_all_open_it(tmp_path):
    path = str(tmp_path / "race.sqlite3")
    errors: list[BaseException] = []

    def open_it() -> None:
        try:
            connect_wal(path, 5.0, "NORMAL", schema).close()
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=open_it) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not errors
    assert mode(Path(path)) == 0o600


def test_the_apps_store_and_rate_limit_files_are_0600_under_umask_0(make_app, instance_path):
    previous = os.umask(0)
    try:
        client = make_app(RATE_LIMIT_AUTH="5 per second").test_client()
        answer = client.post(
            "/login", json={"username": "alice"}, environ_base={"REMOTE_ADDR": "203.0.113.9"}
        )
        assert answer.status_code == 200
    finally:
        os.umask(previous)
    files = sorted(path for path in instance_path.iterdir() if ".sqlite" in path.name)
    assert len([path for path in files if path.name.endswith("-wal")]) == 2, files  # both
    for path in files:
        assert mode(path) == 0o600, path.name
