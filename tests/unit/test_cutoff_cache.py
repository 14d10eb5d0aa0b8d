"""The per-worker cut-off cache (app/sessions/cutoffs.py), on a ManualClock and a store
double: reads at most every refresh interval, keeps known cut-offs when the store fails
and says so once a minute, forgets what can refuse nothing more."""

from __future__ import annotations

import logging
import threading

import pytest

from app.backends.interface import BackendUnavailable
from app.sessions.cutoffs import CutoffCache
from tests.helpers.clock import ManualClock

START = 1_800_000_000.0


class Store:
    """The cut-offs of a store, which can be made to fail."""

    def __init__(self) -> None:
        self.known: dict[str, int] = {}
        self.reads = 0
        self.failing = False
        self.logged_out: list[tuple[str, int]] = []

    def cutoffs(self, newer_than: int) -> dict[str, int]:
        self.reads += 1
        if self.failing:
            raise BackendUnavailable("connection refused")
        return {user: at for user, at in self.known.items() if at > newer_than}

    def log_out_everywhere(self, username: str, at: int) -> int:
        self.logged_out.append((username, at))
        self.known[username] = max(at, self.known.get(username, at))
        return 2


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def store() -> Store:
    return Store()


@pytest.fixture
def cache(store, clock) -> CutoffCache:
    return CutoffCache(store, clock, refresh_every=5, horizon=90)  # type: ignore[arg-type]


def test_a_token_issued_at_or_before_the_cutoff_is_refused(cache, store):
    store.known["alice"] = int(START) - 10
    assert cache.refuses("alice", int(START) - 11)
    assert cache.refuses("alice", int(START) - 10)  # its own second too
    assert not cache.refuses("alice", int(START) - 9)
    assert not cache.refuses("bob", int(START) - 100)


def test_the_store_is_read_at_most_every_refresh_interval(cache, store, clock):
    for _ in range(100):
        cache.refuses("alice", int(START))
    assert store.reads == 1
    store.known["alice"] = int(START)
    clock.advance(4.9)
    assert not cache.refuses("alice", int(START))
    clock.advance(0.1)
    assert cache.refuses("alice", int(START))
    assert store.reads == 2


def test_a_logout_everywhere_here_is_in_force_at_once(cache, store):
    cache.refuses("alice", 0)  # read: nothing yet
    assert cache.log_out_everywhere("alice") == 2
    assert store.logged_out == [("alice", int(START))]
    assert cache.refuses("alice", int(START))
    assert store.reads == 1


def test_a_failing_store_keeps_the_known_cutoffs_and_is_logged_once_a_minute(
    cache, store, clock, caplog
):
    store.known["alice"] = int(START)
    assert cache.refuses("alice", int(START))
    store.failing = True
    with caplog.at_level(logging.WARNING, logger="app.sessions.cutoffs"):
        for _ in range(13):  # a minute of failed reads, one every 5 s, and one more
            clock.advance(5)
            assert cache.refuses("alice", int(START))
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2  # the first failure, and the one a minute later
    assert "connection refused" in messages[0]
    assert "11 more failed reads" in messages[1]
    store.failing = False
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="app.sessions.cutoffs"):
        clock.advance(5)
        cache.refuses("alice", 0)
    assert [record.getMessage() for record in caplog.records] == ["users' cut-offs read again"]


def test_a_cutoff_older_than_the_horizon_is_forgotten(cache, store, clock):
    cache.log_out_everywhere("alice")
    clock.advance(91)  # every access token it refuses has expired
    assert not cache.refuses("alice", int(START))
    assert "alice" not in cache._known


def test_a_cutoff_only_rises(cache, store):
    cache.log_out_everywhere("alice", int(START))
    store.known["alice"] = int(START) - 5  # an older reading
    cache.log_out_everywhere("alice", int(START) - 5)
    assert cache.cutoff_of("alice") == int(START)


def test_wait_out_waits_only_in_the_cutoffs_second(cache, clock):
    cache.wait_out("alice", int(START) - 1)
    assert clock() == START
    clock.advance(0.25)
    cache.wait_out("alice", int(START))
    assert clock() == START + 1


class GatedStore(Store):
    """A store whose reads wait at a gate, for one read under way in another thread."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = threading.Event()
        self.gate = threading.Event()

    def cutoffs(self, newer_than: int) -> dict[str, int]:
        self.reading.set()
        assert self.gate.wait(10)
        return super().cutoffs(newer_than)


def test_a_copy_older_than_the_bound_waits_for_the_read_under_way(clock):
    store = GatedStore()
    store.gate.set()
    cache = CutoffCache(store, clock, refresh_every=5, horizon=900)  # type: ignore[arg-type]
    assert not cache.refuses("alice", int(START))  # read at START: nothing known
    clock.advance(600)  # an idle worker; meanwhile alice was logged out elsewhere
    store.known["alice"] = int(START) + 100
    store.gate.clear()
    store.reading.clear()
    leader = threading.Thread(target=cache.refuses, args=("bob", int(START)))
    leader.start()
    assert store.reading.wait(10)  # the leader's read is under way
    answers: list[bool] = []
    waiter = threading.Thread(target=lambda: answers.append(cache.refuses("alice", int(START))))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()  # it waits: what it knows is 600 s old
    store.gate.set()
    leader.join(10)
    waiter.join(10)
    assert answers == [True]
    assert store.reads == 2


def test_a_copy_read_within_the_bound_does_not_wait_for_the_next_read(clock):
    store = GatedStore()
    store.gate.set()
    cache = CutoffCache(store, clock, refresh_every=5, horizon=900)  # type: ignore[arg-type]
    cache.refuses("alice", int(START))
    clock.advance(5.5)  # due again, the copy 5.5 s old: within the bound and its grace
    store.gate.clear()
    store.reading.clear()
    leader = threading.Thread(target=cache.refuses, args=("bob", int(START)))
    leader.start()
    assert store.reading.wait(10)
    assert not cache.refuses("alice", int(START))  # at once, with the copy it has
    store.gate.set()
    leader.join(10)


def test_nobody_waits_for_reads_that_keep_failing(cache, store, clock):
    cache.refuses("alice", int(START))
    store.failing = True
    clock.advance(600)
    cache.refuses("alice", int(START))  # fails: the known cut-offs stand
    clock.advance(1)  # not due; the copy is old but the store is failing: no wait
    assert not cache.refuses("alice", int(START))
    assert store.reads == 2
