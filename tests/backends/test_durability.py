"""Durability of the SQLite store, per operation: revokes reach the disk before they answer,
logins survive any process crash, and ``strict`` puts every write on disk."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from app.backends.interface import BackendUnavailable
from app.backends.sqlite.store import SQLiteTokenStore
from app.config.parsers import ConfigError
from app.config.settings import Settings
from tests.helpers.tokens import login

LEVELS = {"0": "OFF", "1": "NORMAL", "2": "FULL", "3": "EXTRA"}
SET_LEVEL = re.compile(r"PRAGMA synchronous = (\w+)", re.I)
WRITE = re.compile(r"^\s*(INSERT|DELETE|UPDATE)\b", re.I)


class SyncRecorder:
    """Records, for each write statement run on a connection, the sync level in force."""

    def __init__(self, store: SQLiteTokenStore) -> None:
        self.connection = store._writer._get()  # the connection the store writes with
        self.level = self.current_level()
        self.writes: list[tuple[str, str]] = []
        self.connection.set_trace_callback(self.trace)

    def current_level(self) -> str:
        return LEVELS[str(self.connection.execute("PRAGMA synchronous").fetchone()[0])]

    def trace(self, statement: str) -> None:
        if match := SET_LEVEL.search(statement):
            self.level = LEVELS.get(match.group(1), match.group(1).upper())
        elif match := WRITE.match(statement):
            self.writes.append((match.group(1).upper(), self.level))

    def levels_of(self, operation: Callable[[], object]) -> list[tuple[str, str]]:
        """Run ``operation``; return its writes with their levels (and check the level after)."""
        self.writes = []
        operation()
        self.connection.set_trace_callback(None)
        self.level = after = self.current_level()
        self.connection.set_trace_callback(self.trace)
        self.after = after
        return self.writes


@pytest.fixture
def store_factory(tmp_path) -> Callable[[str], SQLiteTokenStore]:
    stores: list[SQLiteTokenStore] = []

    def make(durability: str) -> SQLiteTokenStore:
        store = SQLiteTokenStore(
            str(tmp_path / f"{durability}.sqlite3"), 2.0, durability=durability
        )
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


def test_default_login_commits_normal_and_every_revoke_commits_full(store_factory):
    store = store_factory("normal")
    recorder = SyncRecorder(store)
    assert recorder.level == "NORMAL"
    assert recorder.levels_of(lambda: store.issue("t1", "alice")) == [("INSERT", "NORMAL")]
    store.issue("t2", "alice")
    store.issue("t3", "bob")
    prefix = store.tokens_of("bob")[0].digest_prefix
    assert recorder.levels_of(lambda: store.revoke("t1")) == [("DELETE", "FULL")]
    assert recorder.after == "NORMAL"  # the next login is NORMAL again
    assert recorder.levels_of(lambda: store.revoke("never-issued")) == [("DELETE", "FULL")]
    assert recorder.levels_of(lambda: store.revoke_all("alice")) == [("DELETE", "FULL")]
    assert recorder.after == "NORMAL"
    assert recorder.levels_of(lambda: store.revoke_digest(prefix)) == [("DELETE", "FULL")]
    assert recorder.after == "NORMAL"
    assert store.count() == 0


def test_strict_commits_every_write_full(store_factory):
    store = store_factory("strict")
    recorder = SyncRecorder(store)
    assert recorder.level == "FULL"
    assert recorder.levels_of(lambda: store.issue("t1", "alice")) == [("INSERT", "FULL")]
    assert recorder.levels_of(lambda: store.revoke("t1")) == [("DELETE", "FULL")]
    assert recorder.after == "FULL"


@pytest.mark.parametrize("durability", ["normal", "strict"])
def test_store_is_in_wal_mode(store_factory, durability):
    store = store_factory(durability)
    assert store._open().execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_failed_revoke_leaves_the_connection_at_normal(store_factory, monkeypatch):
    store = store_factory("normal")
    recorder = SyncRecorder(store)

    def broken(*args):
        raise __import__("sqlite3").OperationalError("disk I/O error")

    monkeypatch.setattr("app.backends.sqlite.store.token_digest", broken)
    with pytest.raises(BackendUnavailable, match="disk I/O error"):
        store.revoke("t1")
    monkeypatch.undo()
    assert recorder.current_level() == "NORMAL"


@pytest.mark.store("sqlite")
@pytest.mark.parametrize(
    ("durability", "login_level"), [(None, "NORMAL"), ("normal", "NORMAL"), ("strict", "FULL")]
)
def test_the_setting_reaches_the_app_store(make_app, durability, login_level):
    overrides = {} if durability is None else {"TOKEN_STORE_DURABILITY": durability}
    app = make_app(**overrides)
    client = app.test_client()
    recorder = SyncRecorder(app.extensions["token_store"])
    tokens: dict[str, str] = {}
    assert recorder.levels_of(lambda: tokens.update(login(client))) == [("INSERT", login_level)]
    revoke = lambda: client.delete(f"/token/{tokens['refreshToken']}")  # noqa: E731
    assert recorder.levels_of(revoke) == [("DELETE", "FULL")]
    app.extensions["token_store"].close()


def test_durability_setting_is_checked(tmp_path):
    with pytest.raises(ConfigError, match="TOKEN_STORE_DURABILITY must be one of normal, strict"):
        Settings.load({"TOKEN_STORE_DURABILITY": "paranoid", "INSTANCE_PATH": str(tmp_path)})
    settings = Settings.load({"TOKEN_STORE_DURABILITY": " Strict ", "INSTANCE_PATH": str(tmp_path)})
    assert settings.store_durability == "strict"
