"""The counters' contract, run on every backend (SQLite, a real redis-server, a real
PostgreSQL): what the rate limits and the failed-login limit rely on.

- ``hit`` counts one hit on each counter given, in one step, and answers each one's
  hits so far in its window and the seconds left in it, in the order given;
- a counter's window starts with its first hit and ends ``window`` seconds later; the
  next hit after that starts a new window at 1;
- ``forgive`` takes one hit back from each running counter named, never below 0, and
  leaves a counter that is absent or whose window ended alone;
- counters of different keys never meet, whatever their keys hold;
- a backend that cannot answer raises BackendUnavailable, whose message never shows a
  password.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from app.backends import backend_at
from app.backends.interface import Backend, BackendUnavailable, Counters


@pytest.fixture
def backend(store_url: str) -> Iterator[Backend]:
    backend = backend_at(store_url, timeout=2)
    yield backend
    backend.close()


@pytest.fixture
def counters(backend: Backend) -> Counters:
    return backend.counters


def test_a_hit_counts_on_every_counter_given_and_answers_in_their_order(counters):
    assert [hits for hits, _ in counters.hit([("a/60", 60), ("a/3600", 3600)])] == [1, 1]
    answer = counters.hit([("a/3600", 3600), ("a/60", 60), ("b/60", 60)])
    assert [hits for hits, _ in answer] == [2, 2, 1]
    assert 3590 < answer[0][1] <= 3600
    assert 50 < answer[1][1] <= 60


def test_keys_that_look_alike_are_counters_of_their_own(counters):
    keys = ["login/192.0.2.1/5/60", "login/192.0.2.1/5/600", "rt:user:a", "%s", "Zoë", "a b"]
    for n, key in enumerate(keys):
        for _ in range(n + 1):
            answer = counters.hit([(key, 60)])
        assert answer[0][0] == n + 1


def test_a_window_ends_and_the_next_hit_starts_a_new_one(counters):
    counters.hit([("short", 1), ("long", 60)])
    counters.hit([("short", 1), ("long", 60)])
    time.sleep(1.1)
    (short, _), (long, _) = counters.hit([("short", 1), ("long", 60)])
    assert (short, long) == (1, 3)


def test_forgive_takes_one_hit_back_never_below_zero(counters):
    for _ in range(3):
        counters.hit([("a", 60)])
    counters.forgive(["a", "absent"])
    assert counters.hit([("a", 60)])[0][0] == 3
    counters.hit([("zero", 60)])
    counters.forgive(["zero"])
    counters.forgive(["zero"])
    assert counters.hit([("zero", 60)])[0][0] == 1
    assert counters.hit([("absent", 60)])[0][0] == 1  # forgiving it made no counter


def test_forgive_leaves_an_ended_window_alone(counters):
    counters.hit([("a", 1)])
    time.sleep(1.1)
    counters.forgive(["a"])
    assert counters.hit([("a", 1)])[0][0] == 1


def refused_port() -> int:
    with socket.socket() as listener:  # bound, never listening: connections are refused
        listener.bind(("127.0.0.1", 0))
        return int(listener.getsockname()[1])


def test_a_backend_that_cannot_answer_raises_backend_unavailable_without_the_password(
    store_url, tmp_path
):
    if store_url.startswith("sqlite"):
        (tmp_path / "down").mkdir()
        (tmp_path / "down" / "rate_limits.sqlite3").mkdir()  # a folder: it cannot be opened
        url = f"sqlite:///{tmp_path / 'down' / 'tokens.sqlite3'}"
    elif store_url.startswith("redis"):
        url = f"redis://:hunter2-secret@127.0.0.1:{refused_port()}/0"
    else:
        url = f"postgresql://tokens:hunter2-secret@127.0.0.1:{refused_port()}/tokens"
    backend = backend_at(url, timeout=1)
    for call in (
        lambda: backend.counters.hit([("a", 60)]),
        lambda: backend.counters.forgive(["a"]),
    ):
        with pytest.raises(BackendUnavailable) as raised:
            call()
        assert "hunter2" not in str(raised.value)
    backend.close()


def test_the_store_and_the_counters_share_the_backends_connections(backend):
    # one pool (PostgreSQL), one client (Redis), or the file beside the store's (SQLite)
    store, counters = backend.store, backend.counters
    if hasattr(store, "client"):
        assert counters.client is store.client
    else:
        assert counters.path == store.path.replace("refresh_tokens.sqlite3", "rate_limits.sqlite3")
