"""The sessions contract, on every store backend: the session rules stated in the
docstring of tests/backends/test_store.py (ids, login and last use, pages, ending one,
logging out everywhere and its cut-off, the idle timeout)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.auth.tokens import new_refresh_token
from app.backends.interface import (
    USER_AGENT_LENGTH,
    IdleSession,
    Issued,
    LiveToken,
    LoginClient,
    Outcome,
    RefreshTokenPolicy,
    RefreshTokenStore,
    Session,
    is_session_id,
    new_session_id,
    successor_of,
)
from app.config.clock import Clock
from tests.helpers.clock import ManualClock
from tests.helpers.stores import open_store

#: A login time on a minute's start, so that minutes are exact.
START = 1_800_000_000.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def make_store(store_url: str, clock: ManualClock) -> Iterator[Callable[..., RefreshTokenStore]]:
    """Return a factory of stores under test on ``clock``, with a policy."""
    opened: list[RefreshTokenStore] = []

    def make(own_clock: Clock | None = None, **policy: Any) -> RefreshTokenStore:
        store = open_store(
            store_url, timeout=2, policy=RefreshTokenPolicy(**policy), clock=own_clock or clock
        )
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def store(make_store: Callable[..., RefreshTokenStore]) -> RefreshTokenStore:
    store = make_store()
    # connected before any Hypothesis example: a pool that makes its first connection
    # draws from ``random`` in its own thread, which Hypothesis takes for the strategy's
    store.ping()
    return store


def all_sessions(store: RefreshTokenStore, username: str) -> list[Session]:
    return store.sessions_of(username, limit=1000).sessions


def test_a_login_is_a_session_with_its_client(store, clock):
    clock.advance(75)
    client = LoginClient("203.0.113.9", "Mozilla/5.0 " + "x" * 300)
    assert store.issue(new_refresh_token(), "alice", client) == Issued(None)
    (session,) = all_sessions(store, "alice")
    assert session.username == "alice"
    assert session.logged_in_at == START + 75
    assert session.last_used_at == START + 60  # to the minute
    assert session.address == "203.0.113.9"
    assert session.user_agent == client.user_agent[:USER_AGENT_LENGTH]
    assert len(session.id) >= 22
    assert session.id.replace("-", "").replace("_", "").isalnum()
    assert all_sessions(store, "bob") == []


def test_a_login_without_a_client_has_an_unknown_one(store):
    store.issue(new_refresh_token(), "alice")
    (session,) = all_sessions(store, "alice")
    assert (session.address, session.user_agent) == ("", "")


@pytest.mark.parametrize("policy", [{}, {"per_user": 5, "lifetime": 3600}])
def test_a_session_keeps_its_id_and_login_across_rotations(make_store, clock, policy):
    store = make_store(**policy)
    token = new_refresh_token()
    store.issue(token, "alice", LoginClient("192.0.2.1", "agent"))
    (first,) = all_sessions(store, "alice")
    for _ in range(3):
        clock.advance(61)
        successor = successor_of(token)
        assert store.rotate(token, successor, "alice").outcome is Outcome.ROTATED
        token = successor
    (session,) = all_sessions(store, "alice")
    assert (session.id, session.logged_in_at, session.address, session.user_agent) == (
        first.id,
        first.logged_in_at,
        "192.0.2.1",
        "agent",
    )
    assert session.last_used_at == START + 180  # 183 s after login, to the minute


def test_last_use_is_written_to_the_minute_by_a_refresh_without_rotation(store, clock):
    token = new_refresh_token()
    store.issue(token, "alice")
    clock.advance(59)
    assert store.owner_of(token) == "alice"
    assert all_sessions(store, "alice")[0].last_used_at == START
    clock.advance(62)
    assert store.owner_of(token) == "alice"
    assert all_sessions(store, "alice")[0].last_used_at == START + 120
    clock.advance(30)
    assert store.owner_of(token) == "alice"
    assert all_sessions(store, "alice")[0].last_used_at == START + 120


def test_sessions_come_in_pages_newest_login_first_ties_by_id(store, clock):
    for _ in range(4):
        for _twice in range(2):  # two logins in each second
            store.issue(new_refresh_token(), "alice")
        clock.advance(1)
    store.issue(new_refresh_token(), "bob")
    everything = all_sessions(store, "alice")
    assert [(s.logged_in_at, s.id) for s in everything] == sorted(
        ((s.logged_in_at, s.id) for s in everything), key=lambda pair: (-pair[0], pair[1])
    )
    pages, after = [], None
    while True:
        page = store.sessions_of("alice", limit=3, after=after)
        pages.append(page.sessions)
        if page.next is None:
            break
        after = page.next
    assert [len(page) for page in pages] == [3, 3, 2]
    assert [session for page in pages for session in page] == everything


@pytest.mark.parametrize("after", ["", "x", "12", ".abc", "-1.abc", "1e3.abc", "\uff11.abc"])
def test_a_cursor_no_page_has_is_a_value_error(store, after):
    with pytest.raises(ValueError, match="cursor"):
        store.sessions_of("alice", after=after)


@pytest.mark.parametrize("limit", [0, -1, 1001])
def test_a_page_size_out_of_bounds_is_a_value_error(store, limit):
    with pytest.raises(ValueError, match="page"):
        store.sessions_of("alice", limit=limit)


def test_ending_a_session_revokes_its_whole_family(store):
    token, other = new_refresh_token(), new_refresh_token()
    store.issue(token, "alice")
    (kept,) = all_sessions(store, "alice")
    store.issue(other, "alice")
    (ended,) = [s for s in all_sessions(store, "alice") if s.id != kept.id]
    successor = successor_of(other)
    store.rotate(other, successor, "alice")
    assert store.end_session("alice", ended.id) is True
    assert store.owner_of(successor) is None
    assert store.rotate(other, successor_of(other), "alice").outcome is Outcome.UNKNOWN
    assert store.owner_of(token) == "alice"
    assert store.end_session("alice", ended.id) is False
    assert all_sessions(store, "alice") == [kept]


def test_another_users_session_is_like_an_unknown_one(store):
    store.issue(token := new_refresh_token(), "alice")
    (session,) = all_sessions(store, "alice")
    assert store.end_session("bob", session.id) is False
    assert store.end_session("alice", "no-such-session") is False
    assert store.owner_of(token) == "alice"


def test_log_out_everywhere_ends_the_sessions_begun_by_then_and_sets_the_cutoff(store, clock):
    old = [new_refresh_token() for _ in range(3)]
    for token in old:
        store.issue(token, "alice")
    store.issue(bobs := new_refresh_token(), "bob")
    rotated = successor_of(old[0])
    clock.advance(10)
    store.rotate(old[0], rotated, "alice")  # a rotation is no new login
    assert store.log_out_everywhere("alice", int(START) + 10) == 3
    assert store.owner_of(rotated) is None
    assert all_sessions(store, "alice") == []
    assert store.owner_of(bobs) == "bob"
    assert store.cutoffs(0) == {"alice": int(START) + 10}
    assert store.cutoffs(int(START) + 10) == {}
    assert store.issue(new_refresh_token(), "alice").cutoff == int(START) + 10
    assert store.issue(new_refresh_token(), "bob").cutoff is None


def test_log_out_everywhere_keeps_the_sessions_begun_after(store, clock):
    store.issue(new_refresh_token(), "alice")
    clock.advance(5)
    store.issue(later := new_refresh_token(), "alice")
    assert store.log_out_everywhere("alice", int(START) + 4) == 1
    assert store.owner_of(later) == "alice"


def test_log_out_everywhere_is_idempotent_and_keeps_a_login_made_since(store):
    at = int(START)
    store.issue(new_refresh_token(), "alice")
    assert store.log_out_everywhere("alice", at) == 1
    store.issue(since := new_refresh_token(), "alice")  # the same second, after it
    assert store.log_out_everywhere("alice", at) == 0
    assert store.log_out_everywhere("alice", at - 100) == 0
    assert store.owner_of(since) == "alice"
    assert store.cutoffs(0) == {"alice": at}
    assert store.log_out_everywhere("alice", at + 1) == 1
    assert store.cutoffs(0) == {"alice": at + 1}


def test_idle_sessions_are_refused_and_removed(make_store, clock):
    store = make_store(idle_timeout=600)
    kept, idle, rotating = new_refresh_token(), new_refresh_token(), new_refresh_token()
    for token in (kept, idle, rotating):
        store.issue(token, "alice")
    clock.advance(540)
    assert store.owner_of(kept) == "alice"  # used in the 9th minute
    clock.advance(60)  # idle for 600 s, counted from the end of their minute: still listed
    assert len(all_sessions(store, "alice")) == 3
    clock.advance(60)
    assert len(all_sessions(store, "alice")) == 1
    assert store.owner_of(idle) == IdleSession("alice")  # ended now: the caller logs it
    assert store.owner_of(idle) is None  # and then unknown
    idle_end = store.rotate(rotating, successor_of(rotating), None)
    assert (idle_end.outcome, idle_end.owner) == (Outcome.IDLE, "alice")
    assert store.rotate(rotating, successor_of(rotating), "alice").outcome is Outcome.UNKNOWN
    assert store.count() == 1  # both removed
    assert store.owner_of(kept) == "alice"
    clock.advance(660)
    assert all_sessions(store, "alice") == []
    assert store.owner_of(kept) == IdleSession("alice")


def test_an_idle_session_cannot_be_ended_as_a_listed_one_and_is_removed(make_store, clock):
    store = make_store(idle_timeout=600)
    idle, kept = new_refresh_token(), new_refresh_token()
    store.issue(idle, "alice")
    (gone,) = all_sessions(store, "alice")
    clock.advance(660)
    store.issue(kept, "alice")
    (listed,) = all_sessions(store, "alice")  # the idle one is listed no more
    assert not store.end_session("alice", gone.id)  # so its id is unknown
    assert store.count() == 1  # removed all the same
    assert store.end_session("alice", listed.id)
    assert store.count() == 0


def test_a_session_used_within_the_idle_timeout_is_never_refused(make_store, clock):
    store = make_store(idle_timeout=60)  # the shortest: as long as the last use's minute
    token = new_refresh_token()
    store.issue(token, "alice")
    for _ in range(9):  # every 20 s, across minutes
        clock.advance(20)
        assert store.owner_of(token) == "alice"


def test_a_new_session_id_is_random_url_safe_and_never_an_option():
    ids = [new_session_id() for _ in range(5000)]  # one id in 64 would begin with "-"
    assert len(set(ids)) == len(ids)
    assert all(is_session_id(each) and len(each) >= 22 for each in ids)  # 128 bits and more
    assert not any(each.startswith("-") for each in ids)
    assert {each[0] for each in ids} >= {"_", "A", "z", "0"}  # the rest of the alphabet


def test_describe_tells_what_owner_of_accepts_with_its_times(make_store, clock):
    store = make_store(lifetime=3600)
    token, other = new_refresh_token(), new_refresh_token()
    store.issue(token, "alice")
    clock.advance(30)
    store.issue(other, "bob")
    assert store.describe(token) == LiveToken("alice", int(START), int(START) + 3600)
    assert store.describe(new_refresh_token()) is None
    assert store.describe("") is None
    successor = successor_of(token)
    store.rotate(token, successor, "alice")
    assert store.describe(token) is None  # retired
    assert store.describe(successor) == LiveToken("alice", int(START) + 30, int(START) + 3600)
    store.revoke(other)
    assert store.describe(other) is None
    clock.advance(3600)
    assert store.describe(successor) is None  # expired
    assert make_store().describe(successor) is None


def test_describe_records_no_use_and_refuses_an_idle_session(make_store, clock):
    store = make_store(idle_timeout=600)
    token = new_refresh_token()
    store.issue(token, "alice")
    for _ in range(10):  # a look from outside every minute: the session still goes idle
        clock.advance(60)
        assert store.describe(token) == LiveToken("alice", int(START), None)
    clock.advance(60)
    assert store.describe(token) is None
    assert store.count() == 1  # left for its next use to remove
    assert store.owner_of(token) == IdleSession("alice")
    assert store.count() == 0


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(address=st.text(max_size=60), user_agent=st.text(max_size=400))
def test_the_client_is_kept_as_text(store, address, user_agent):
    client = LoginClient(address, user_agent)
    store.issue(new_refresh_token(), "carol", client)
    (listed,) = all_sessions(store, "carol")
    assert store.end_session("carol", listed.id)  # leaves the next example an empty user
    assert (listed.address, listed.user_agent) == (client.kept().address, client.kept().user_agent)


def test_what_no_store_holds_is_replaced_in_the_client():
    kept = LoginClient("a\x00b", "\ud800x").kept()
    assert kept == LoginClient("a\ufffdb", "?x")


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    after=st.text(max_size=80) | st.just("1.a\x00b"),
    session_id=st.text(max_size=80) | st.just("a\x00"),
)
def test_any_cursor_is_a_page_or_a_value_error_and_any_id_no_session(store, after, session_id):
    try:
        page = store.sessions_of("alice", limit=2, after=after)
    except ValueError:
        pass
    else:
        assert page.sessions == []  # nobody logged in: no page holds anything
    assert store.end_session("alice", session_id) is False
