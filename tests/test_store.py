"""One test-suite for every refresh-token store backend (SQLite, and a real redis-server)."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from app.config import ConfigError, Settings
from app.store import RefreshTokenStore, StoreUnavailableError, open_store, token_digest
from app.store.base import DIGEST_PREFIX_LENGTH
from app.tokens import new_refresh_token
from tests.conftest import stored_contents

#: Usernames that a key or a column could confuse with one another, or mangle.
TRICKY_USERNAMES = ["a", "a:b", "b", "a:", ":a", "rt:user:a", "Zoë 山田", "a b", "A", "%s", "🔑"]


@pytest.fixture
def store(store_url: str) -> Iterator[RefreshTokenStore]:
    store = open_store(store_url, timeout=2)
    yield store
    store.close()


def digest_prefix(token: str) -> str:
    return token_digest(token)[:DIGEST_PREFIX_LENGTH]


# --- issue, look up, revoke ------------------------------------------------------------


def test_issued_token_is_owned_by_its_user(store):
    token = new_refresh_token()
    store.issue(token, "alice")
    assert store.owner_of(token) == "alice"


def test_unknown_token_has_no_owner(store):
    store.issue(new_refresh_token(), "alice")
    assert store.owner_of(new_refresh_token()) is None
    assert store.owner_of("") is None


def test_revoke_forgets_a_known_token_and_says_so(store):
    token, other = new_refresh_token(), new_refresh_token()
    store.issue(token, "alice")
    store.issue(other, "alice")
    assert store.revoke(token) is True
    assert store.owner_of(token) is None
    assert store.owner_of(other) == "alice"
    assert store.count() == 1


def test_revoke_unknown_token_changes_nothing(store):
    token = new_refresh_token()
    store.issue(token, "alice")
    assert store.revoke(new_refresh_token()) is False
    assert store.revoke("x" * 300) is False
    assert store.owner_of(token) == "alice"
    assert store.count() == 1


def test_revoke_twice_is_known_once(store):
    token = new_refresh_token()
    store.issue(token, "alice")
    assert [store.revoke(token), store.revoke(token)] == [True, False]


def test_usernames_are_kept_exactly_and_apart(store):
    tokens = {username: new_refresh_token() for username in TRICKY_USERNAMES}
    for username, token in tokens.items():
        store.issue(token, username)
    for username, token in tokens.items():
        assert store.owner_of(token) == username
        assert [record.digest_prefix for record in store.tokens_of(username)] == [
            digest_prefix(token)
        ]
    assert store.revoke_all("a") == 1
    assert store.owner_of(tokens["a:b"]) == "a:b"
    assert store.count() == len(TRICKY_USERNAMES) - 1


def test_store_keeps_digests_only_never_a_token(store):
    tokens = [new_refresh_token() for _ in range(5)]
    for token in tokens:
        store.issue(token, "alice")
    contents = stored_contents(store)
    for token in tokens:
        assert token not in contents
        assert token_digest(token) in contents


# --- per-user listing and revocation, operators' look-ups --------------------------------


def test_tokens_of_lists_prefixes_and_issue_times_oldest_first(store):
    before = int(time.time())
    tokens = [new_refresh_token() for _ in range(4)]
    for token in tokens:
        store.issue(token, "alice")
    store.issue(new_refresh_token(), "bob")
    records = store.tokens_of("alice")
    assert {record.digest_prefix for record in records} == {digest_prefix(t) for t in tokens}
    assert all(record.username == "alice" for record in records)
    assert all(before <= record.issued_at <= time.time() for record in records)
    order = [(record.issued_at, record.digest_prefix) for record in records]
    assert order == sorted(order)


def test_tokens_of_unknown_user_is_empty(store):
    store.issue(new_refresh_token(), "alice")
    assert store.tokens_of("nobody") == []


def test_revoke_all_forgets_one_users_tokens_only(store):
    alice = [new_refresh_token() for _ in range(3)]
    bob = new_refresh_token()
    for token in alice:
        store.issue(token, "alice")
    store.issue(bob, "bob")
    assert store.revoke_all("alice") == 3
    assert all(store.owner_of(token) is None for token in alice)
    assert store.tokens_of("alice") == []
    assert store.owner_of(bob) == "bob"
    assert store.count() == 1
    assert store.revoke_all("alice") == 0
    assert store.revoke_all("nobody") == 0


def test_revoke_digest_forgets_the_one_token_a_prefix_names(store):
    token, other = new_refresh_token(), new_refresh_token()
    store.issue(token, "alice")
    store.issue(other, "alice")
    assert store.revoke_digest(digest_prefix(token).upper()) == 1
    assert store.owner_of(token) is None
    assert store.owner_of(other) == "alice"
    assert store.revoke_digest(token_digest(other)) == 1  # the whole digest works too
    assert store.count() == 0


def test_revoke_digest_refuses_an_ambiguous_unknown_or_bad_prefix(store):
    # 17 digests: two of them share a first hex digit
    tokens = [new_refresh_token() for _ in range(17)]
    for token in tokens:
        store.issue(token, "alice")
    first_digits = Counter(token_digest(token)[0] for token in tokens)
    shared = next(digit for digit, seen in first_digits.items() if seen > 1)
    assert store.revoke_digest(shared) == 0
    for bad in ["", "zz", "%", "0" * 65, "g", "*", "' OR 1=1 --"]:
        assert store.revoke_digest(bad) == 0
    unknown = next(p for p in (f"{n:03x}" for n in range(4096)) if not any(
        token_digest(token).startswith(p) for token in tokens
    ))  # fmt: skip
    assert store.revoke_digest(unknown) == 0
    assert store.count() == 17


def test_count_counts_every_users_tokens(store):
    assert store.count() == 0
    for n in range(5):
        store.issue(new_refresh_token(), f"user{n % 2}")
    assert store.count() == 5


def test_ping_answers(store):
    store.ping()


def test_closed_store_reopens_on_next_use(store):
    token = new_refresh_token()
    store.issue(token, "alice")
    store.close()
    assert store.owner_of(token) == "alice"


# --- concurrency and processes --------------------------------------------------------

THREADS = 8
ISSUES_PER_THREAD = 40
RACED_TOKENS = 120


def test_many_threads_issuing_and_revoking_lose_nothing_and_double_nothing(store):
    # Tokens that every pair of threads will race to revoke.
    raced = [new_refresh_token() for _ in range(RACED_TOKENS)]
    for token in raced:
        store.issue(token, "raced")
    start = threading.Barrier(THREADS, timeout=30)

    def work(worker: int) -> tuple[list[tuple[str, str]], list[tuple[str, bool]]]:
        start.wait()
        issued, revoked = [], []
        mine = raced[(worker // 2) :: THREADS // 2]  # two threads share each slice
        for n in range(ISSUES_PER_THREAD):
            token, username = new_refresh_token(), f"user{(worker + n) % 4}"
            store.issue(token, username)
            issued.append((token, username))
            if n < len(mine):
                revoked.append((mine[n], store.revoke(mine[n])))
        return issued, revoked

    with ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(work, range(THREADS)))

    issued = [pair for thread_issued, _ in results for pair in thread_issued]
    known = Counter()
    for _, thread_revoked in results:
        for token, was_known in thread_revoked:
            known[token] += was_known
    assert sorted(known.values()) == [1] * RACED_TOKENS  # each raced token: True exactly once
    assert store.count() == THREADS * ISSUES_PER_THREAD
    assert store.tokens_of("raced") == []
    for token, username in issued:
        assert store.owner_of(token) == username
    for user in range(4):
        expected = sorted(digest_prefix(t) for t, name in issued if name == f"user{user}")
        listed = sorted(record.digest_prefix for record in store.tokens_of(f"user{user}"))
        assert listed == expected


def test_revoke_all_racing_issues_leaves_a_consistent_store(store):
    start = threading.Barrier(2, timeout=30)
    issued: list[str] = []

    def issue_many() -> None:
        start.wait()
        for _ in range(100):
            token = new_refresh_token()
            store.issue(token, "alice")
            issued.append(token)

    def revoke_many() -> int:
        start.wait()
        return sum(store.revoke_all("alice") for _ in range(20))

    with ThreadPoolExecutor(2) as pool:
        issuing, revoking = pool.submit(issue_many), pool.submit(revoke_many)
        issuing.result()
        revoked = revoking.result()
    survivors = [token for token in issued if store.owner_of(token) is not None]
    assert revoked + len(survivors) == len(issued)
    assert store.count() == len(survivors)
    listed = sorted(record.digest_prefix for record in store.tokens_of("alice"))
    assert listed == sorted(digest_prefix(token) for token in survivors)


def _use_in_child(store: RefreshTokenStore, parents_token: str, results) -> None:
    child_token = new_refresh_token()
    store.issue(child_token, "child")
    results.put((store.owner_of(parents_token), child_token))


def test_a_forked_child_uses_its_own_connections(store):
    token = new_refresh_token()
    store.issue(token, "parent")  # the parent's connection is open when it forks
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    children = [
        context.Process(target=_use_in_child, args=(store, token, results)) for _ in range(3)
    ]
    for child in children:
        child.start()
    seen = [results.get(timeout=20) for _ in children]
    for child in children:
        child.join(20)
        assert child.exitcode == 0
    assert [owner for owner, _ in seen] == ["parent"] * 3
    assert all(store.owner_of(child_token) == "child" for _, child_token in seen)
    assert store.owner_of(token) == "parent"  # the parent's own connection still works
    assert store.count() == 4


# --- an unreachable store ------------------------------------------------------------


def test_store_timeouts_are_settings():
    assert Settings.load().store_timeout == 2.0
    assert Settings.load().store_connect_timeout is None  # then TOKEN_STORE_TIMEOUT
    assert Settings.load({"TOKEN_STORE_CONNECT_TIMEOUT": "0.25"}).store_connect_timeout == 0.25
    for bad in ["0", "61", "nan", "soon"]:
        with pytest.raises(ConfigError, match="TOKEN_STORE_CONNECT_TIMEOUT must be"):
            Settings.load({"TOKEN_STORE_CONNECT_TIMEOUT": bad})


@pytest.fixture
def unreachable_store_url(store_url: str, tmp_path, request) -> str:
    if store_url.startswith("sqlite:///"):
        (tmp_path / "directory.sqlite3").mkdir()
        return f"sqlite:///{tmp_path}/directory.sqlite3"
    server = request.getfixturevalue("redis_server")()
    server.stop()  # a port where nothing listens any more
    return server.url


OPERATIONS = {
    "issue": lambda store: store.issue(new_refresh_token(), "alice"),
    "owner_of": lambda store: store.owner_of(new_refresh_token()),
    "revoke": lambda store: store.revoke(new_refresh_token()),
    "tokens_of": lambda store: store.tokens_of("alice"),
    "revoke_all": lambda store: store.revoke_all("alice"),
    "revoke_digest": lambda store: store.revoke_digest("abcdef12"),
    "count": lambda store: store.count(),
    "ping": lambda store: store.ping(),
}


@pytest.mark.parametrize("operation", OPERATIONS)
def test_unreachable_store_raises_store_unavailable_at_once(unreachable_store_url, operation):
    store = open_store(unreachable_store_url, timeout=1)
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError):
        OPERATIONS[operation](store)
    assert time.monotonic() - started < 1.5
    store.close()
