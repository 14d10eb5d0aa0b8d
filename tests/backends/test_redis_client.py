"""The store URL's parser and the Redis client: one of each for every user."""

from __future__ import annotations

import socket

import pytest

from app.backends import backend_at
from app.backends.interface import BackendUnavailable
from app.backends.redis.client import read_lua, redis_location
from app.config.store_url import parse_store_url, sqlite_url


@pytest.mark.parametrize(
    ("url", "backend", "path"),
    [
        ("sqlite:////var/lib/tokens.sqlite3", "sqlite", "/var/lib/tokens.sqlite3"),
        ("sqlite:///instance/tokens.sqlite3", "sqlite", "instance/tokens.sqlite3"),
        ("sqlite:///", "sqlite", ""),
        ("redis://127.0.0.1:6379/0", "redis", ""),
        ("rediss://:secret@cache.example:6380/1", "redis", ""),
        ("unix:///run/redis.sock?db=2", "redis", ""),
    ],
)
def test_a_store_url_names_its_backend_and_place(url, backend, path):
    location = parse_store_url(url)
    assert (location.backend, location.path, location.url) == (backend, path, url)


@pytest.mark.parametrize(
    "url", ["sqlite://tokens.sqlite3", "mysql://x", "postgres:x", "", "/tmp/x"]
)
def test_an_unknown_store_url_is_refused_in_one_line(url):
    with pytest.raises(ValueError, match=r"^TOKEN_STORE_URL must start with sqlite:///, redis://"):
        parse_store_url(url)


def test_sqlite_url_and_parse_store_url_are_inverse():
    assert parse_store_url(sqlite_url("/var/lib/tokens.sqlite3")).path == "/var/lib/tokens.sqlite3"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://user:hunter2-secret@10.0.0.1:6380/3", "10.0.0.1:6380 db 3"),
        ("redis://:hunter2-secret@cache", "cache:6379 db 0"),
        ("unix://:hunter2-secret@/run/redis.sock?db=2", "/run/redis.sock db 2"),
    ],
)
def test_a_location_never_shows_the_password(url, shown):
    assert redis_location(url) == shown


def refused_port() -> int:
    with socket.socket() as listener:  # bound, never listening: connections are refused
        listener.bind(("127.0.0.1", 0))
        return int(listener.getsockname()[1])


def test_both_users_turn_a_failure_into_their_own_error_without_the_password():
    url = f"redis://:hunter2-secret@127.0.0.1:{refused_port()}/0"
    backend = backend_at(url, timeout=1)
    store, counters = backend.store, backend.counters
    with pytest.raises(BackendUnavailable, match=r"^Redis store 127\.0\.0\.1:\d+ db 0: ") as a:
        store.ping()
    with pytest.raises(BackendUnavailable, match=r"^Redis 127\.0\.0\.1:\d+ db 0: ") as b:
        counters.hit([("login/192.0.2.1/5/60", 60)])
    for error in (a.value, b.value):
        assert "ConnectionError" in str(error)
        assert "hunter2" not in str(error)


def test_the_store_and_the_counters_share_one_client_with_the_timeouts_and_no_retry():
    backend = backend_at("redis://127.0.0.1:1/0", 0.7, 0.3)
    client = backend.store.client
    assert backend.counters.client is client
    options = client.connection_pool.connection_kwargs
    assert (options["socket_timeout"], options["socket_connect_timeout"]) == (0.7, 0.3)
    assert options["retry"].get_retries() == 0


def test_the_lua_scripts_are_read_from_the_package():
    assert "local function forget(digest)" in read_lua("forget.lua")
    assert read_lua("hit.lua").startswith("-- KEYS: one counter per limit")
