"""The store contract: one suite for every refresh-token store backend (SQLite, a real
redis-server, a real PostgreSQL). The rules of families, stated once here:

- A store keeps refresh tokens by digest, each with the username it was issued to; it
  never keeps a token in clear. Every operation is atomic on its own, from any process
  or thread, and a backend that cannot answer raises BackendUnavailable, nothing else.
- With rotation, each login starts a *family*: ``rotate`` retires the token presented
  and records its successor in the same family, so a family has one live token and
  the others are retired, kept only to recognise their reuse. A retired token is never
  a valid one: ``owner_of`` does not know it, and listings and counts leave it out.
- Of several rotations with one token, one succeeds; the others find it retired and
  revoke the whole family (reuse, RFC 9700 4.14.2), unless the policy's ``reuse_grace``
  covers them: within the grace from the token's rotation, while its own successor is
  unused and not replaced, a retry replaces that successor (retired, not forgotten:
  presenting it later is reuse). A replaced successor is nobody's parent.
- A successor carries its family's lineage (``successor_of``), and the family keeps the
  lineage's digest while it lives, set at its first rotation: a token whose own digest
  the family forgot (older than ``RETIRED_GENERATIONS_KEPT`` generations) is still
  recognised as one of its own, and presenting it is reuse. A login stays one record,
  with no lineage.
- ``revoke`` forgets a token and its whole family: the live token is a logout, an older
  one is reuse. Forgetting any token of a family forgets the whole family.
- The per-user limit (``per_user``): issuing one token too many forgets the user's
  oldest live token (by issue, or last rotation; same-second ones in order of issue),
  with its family, in the same step.
- The lifetime: a token is unknown from ``lifetime`` seconds after its login, to the
  second; successors keep their family's expiry. Expired tokens are purged in bounded
  batches through an index.
- Deny entries refuse a signed token's digest until a time, then are forgotten.
- A *session* is a family: ``issue`` starts one with a random id (not derived from the
  token), its login time and the client seen (the User-Agent cut to 256 characters);
  every token rotated from it carries the same. Its last use is kept to the minute and
  written at most once a minute (by ``owner_of`` and ``rotate``). ``sessions_of`` pages
  a user's live sessions, newest login first, ties by id, by a keyset cursor, through an
  index by username. ``end_session`` forgets a session's whole family, only the user's
  own. ``log_out_everywhere(user, at)`` forgets every session begun at or before ``at``
  and raises the user's cut-off to ``at``, in one step; when the cut-off is ``at`` or
  later already it does nothing, so a login made since stays. ``issue`` returns the
  user's cut-off, read in its step. With ``idle_timeout``, a session whose last use
  (to the minute) is that long ago is refused (unknown) and forgotten when presented,
  and listed no more (tests/backends/test_sessions.py).
- ``export`` and ``import_records`` carry all of the above, so a copied family behaves
  exactly as the original (tests/backends/test_store_copy.py, every pair of backends).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.auth.tokens import REFRESH_TOKEN_ALPHABET, new_refresh_token
from app.backends.interface import (
    DIGEST_PREFIX_LENGTH,
    LINEAGE_LENGTH,
    RETIRED_GENERATIONS_KEPT,
    BackendUnavailable,
    Outcome,
    RefreshTokenPolicy,
    RefreshTokenStore,
    Revocation,
    lineage_digest,
    successor_of,
    token_digest,
)
from app.backends.postgres.store import PostgresTokenStore
from app.backends.redis.store import TOKEN_KEY_PREFIX, RedisTokenStore
from app.backends.sqlite.store import SQLiteTokenStore
from app.config.clock import SYSTEM_CLOCK, Clock
from app.config.parsers import ConfigError
from app.config.settings import Settings
from tests.helpers.clock import ManualClock
from tests.helpers.servers import free_port
from tests.helpers.stores import OPERATIONS, open_store, stored_contents

#: Usernames that a key or a column could confuse with one another, or mangle.
TRICKY_USERNAMES = ["a", "a:b", "b", "a:", ":a", "rt:user:a", "Zoë 山田", "a b", "A", "%s", "🔑"]


@pytest.fixture
def store(store_url: str) -> Iterator[RefreshTokenStore]:
    store = open_store(store_url, timeout=2)
    yield store
    store.close()


def digest_prefix(token: str) -> str:
    return token_digest(token)[:DIGEST_PREFIX_LENGTH]


def stored_digests(store: RefreshTokenStore) -> set[str]:
    """Return the digest of every record the store holds: live, retired or expired."""
    if isinstance(store, SQLiteTokenStore):
        with contextlib.closing(sqlite3.connect(store.path)) as database:
            return {digest for (digest,) in database.execute("SELECT digest FROM refresh_tokens")}
    if isinstance(store, PostgresTokenStore):
        with psycopg.connect(store.url) as database:
            return {digest for (digest,) in database.execute("SELECT digest FROM refresh_tokens")}
    assert isinstance(store, RedisTokenStore)
    return {key.removeprefix(TOKEN_KEY_PREFIX) for key in store.client.scan_iter("rt:token:*")}


def forget_lineages(store: RefreshTokenStore) -> None:
    """Leave the store as an earlier version left it: no family knows its lineage."""
    if isinstance(store, SQLiteTokenStore):
        with contextlib.closing(sqlite3.connect(store.path)) as database, database:
            database.execute("UPDATE refresh_tokens SET lineage = NULL")
    elif isinstance(store, PostgresTokenStore):
        with psycopg.connect(store.url) as database:
            database.execute("UPDATE refresh_tokens SET lineage = NULL")
    else:
        assert isinstance(store, RedisTokenStore)
        client = store.client
        for key in client.scan_iter("rt:token:*"):
            client.hdel(key, "lineage")
        for key in client.scan_iter("rt:lineage:*"):
            client.delete(key)


@pytest.fixture
def make_store(store_url: str) -> Iterator[Callable[..., RefreshTokenStore]]:
    """Return a factory of stores on the one store under test, with a policy, on a clock of
    their own that moves only when told (or on ``clock``)."""
    opened: list[RefreshTokenStore] = []

    def make(clock: Clock | None = None, **policy: Any) -> RefreshTokenStore:
        store = open_store(
            store_url,
            timeout=2,
            policy=RefreshTokenPolicy(**policy),
            clock=ManualClock() if clock is None else clock,
        )
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


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
    assert store.revoke(token).known is True
    assert store.owner_of(token) is None
    assert store.owner_of(other) == "alice"
    assert store.count() == 1


def test_revoke_unknown_token_changes_nothing(store):
    token = new_refresh_token()
    store.issue(token, "alice")
    assert store.revoke(new_refresh_token()).known is False
    assert store.revoke("x" * 300).known is False
    assert store.owner_of(token) == "alice"
    assert store.count() == 1


def test_revoke_twice_is_known_once(store):
    token = new_refresh_token()
    store.issue(token, "alice")
    assert [store.revoke(token).known, store.revoke(token).known] == [True, False]


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
    times = [record.issued_at for record in records]
    assert times == sorted(times)


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


# --- rotation: families, reuse, the grace -------------------------------------------


def rotated(store: RefreshTokenStore, token: str, username: str = "alice") -> str:
    """Rotate ``token`` and return its successor, checking that the rotation succeeded."""
    successor = successor_of(token)
    assert store.rotate(token, successor, username).outcome is Outcome.ROTATED
    return successor


def test_rotation_retires_the_token_and_records_its_successor(make_store):
    store = make_store()
    token = new_refresh_token()
    store.issue(token, "alice")
    successor = new_refresh_token()
    rotation = store.rotate(token, successor, "alice")
    assert (rotation.outcome, rotation.family) == (Outcome.ROTATED, digest_prefix(token))
    assert rotation.succeeded
    assert store.owner_of(token) is None
    assert store.owner_of(successor) == "alice"
    assert [record.digest_prefix for record in store.tokens_of("alice")] == [
        digest_prefix(successor)
    ]
    assert store.count() == 1


def test_rotation_of_an_unknown_token_or_another_users_changes_nothing(make_store):
    store = make_store()
    token = new_refresh_token()
    store.issue(token, "alice")
    for presented, username, outcome in [
        (new_refresh_token(), "alice", Outcome.UNKNOWN),
        ("", "alice", Outcome.UNKNOWN),
        (token, "bob", Outcome.OTHER_USER),
        (token, "Alice", Outcome.OTHER_USER),
    ]:
        successor = new_refresh_token()
        rotation = store.rotate(presented, successor, username)
        assert (rotation.outcome, rotation.family, rotation.succeeded) == (outcome, "", False)
        assert store.owner_of(successor) is None
    assert store.owner_of(token) == "alice"
    assert store.count() == 1


def test_rotation_for_whoever_owns_the_token_names_the_owner(make_store):
    # the OAuth refresh grant names no user: None takes the token's owner
    store = make_store(reuse_grace=10)
    first = new_refresh_token()
    store.issue(first, "alice")
    second = successor_of(first)
    rotation = store.rotate(first, second, None)
    assert (rotation.outcome, rotation.owner) == (Outcome.ROTATED, "alice")
    assert store.owner_of(second) == "alice"
    retry = store.rotate(first, successor_of(first), None)  # within the grace
    assert (retry.outcome, retry.owner) == (Outcome.RETRIED, "alice")
    assert store.rotate(new_refresh_token(), new_refresh_token(), None).owner == ""
    stolen = new_refresh_token()
    store.issue(stolen, "bob")
    thiefs_flush(store, stolen, "bob")
    reuse = store.rotate(stolen, successor_of(stolen), None)  # known by its lineage only
    assert (reuse.outcome, reuse.owner) == (Outcome.REUSED, "bob")
    assert store.rotate(stolen, new_refresh_token(), None).outcome is Outcome.UNKNOWN


def test_a_reuse_for_whoever_owns_the_token_ends_the_family(make_store):
    store = make_store()
    first = new_refresh_token()
    store.issue(first, "alice")
    second = rotated(store, first)
    reuse = store.rotate(first, new_refresh_token(), None)
    assert (reuse.outcome, reuse.owner, reuse.family) == (
        Outcome.REUSED,
        "alice",
        digest_prefix(first),
    )
    assert store.owner_of(second) is None
    assert store.count() == 0


@pytest.mark.parametrize(("generations", "reused"), [(1, 0), (2, 0), (2, 1), (5, 0), (5, 4)])
def test_reusing_any_retired_token_revokes_its_whole_family(make_store, generations, reused):
    store = make_store()
    chain = [new_refresh_token()]
    store.issue(chain[0], "alice")
    other_family = new_refresh_token()
    store.issue(other_family, "alice")
    for _ in range(generations):
        chain.append(rotated(store, chain[-1]))
    rotation = store.rotate(chain[reused], new_refresh_token(), "alice")
    assert (rotation.outcome, rotation.family) == (Outcome.REUSED, digest_prefix(chain[0]))
    assert not rotation.succeeded
    assert all(store.owner_of(token) is None for token in chain)
    # the family is forgotten: presented again, any member is only unknown
    for token in chain:
        assert store.rotate(token, new_refresh_token(), "alice").outcome is Outcome.UNKNOWN
    assert store.owner_of(other_family) == "alice"
    assert store.count() == 1


def test_a_family_keeps_its_last_retired_generations_whole(make_store):
    store = make_store()
    chain = [new_refresh_token()]
    store.issue(chain[0], "alice")
    for _ in range(RETIRED_GENERATIONS_KEPT + 1):
        chain.append(rotated(store, chain[-1]))
    kept = {token_digest(token) for token in chain[1:]}
    assert token_digest(chain[0]) not in stored_digests(store)
    assert kept <= stored_digests(store)


def thiefs_flush(store: RefreshTokenStore, stolen: str, username: str = "alice") -> list[str]:
    """Rotate ``stolen`` one generation more than a family keeps whole, as a thief would to
    make the owner's replay unknown; return the chain, ``stolen`` first."""
    chain = [stolen]
    for _ in range(RETIRED_GENERATIONS_KEPT + 1):
        chain.append(rotated(store, chain[-1], username))
    assert token_digest(stolen) not in stored_digests(store)  # its own record is gone
    return chain


@pytest.mark.parametrize("grace", [0, 10])
def test_a_token_the_family_forgot_is_still_reuse_by_its_lineage(make_store, grace):
    store = make_store(reuse_grace=grace)
    stolen, other_family = new_refresh_token(), new_refresh_token()
    store.issue(stolen, "alice")
    store.issue(other_family, "alice")
    chain = thiefs_flush(store, stolen)
    rotation = store.rotate(stolen, successor_of(stolen), "alice")  # the owner's replay
    assert (rotation.outcome, rotation.family) == (Outcome.REUSED, digest_prefix(stolen))
    assert all(store.owner_of(token) is None for token in chain)
    assert store.owner_of(other_family) == "alice"
    assert store.count() == 1
    # the family is over, its lineage with it: presented again, the token is unknown
    assert store.rotate(stolen, new_refresh_token(), "alice").outcome is Outcome.UNKNOWN
    assert lineage_digest(stolen) not in stored_contents(store)


def test_a_family_of_an_earlier_version_gets_its_lineage_at_its_next_rotation(make_store):
    store = make_store()
    first = new_refresh_token()
    store.issue(first, "alice")
    live = new_refresh_token()  # an earlier version's successor: of no lineage
    assert store.rotate(first, live, "alice").outcome is Outcome.ROTATED
    forget_lineages(store)
    chain = thiefs_flush(store, live)
    rotation = store.rotate(live, successor_of(live), "alice")
    assert (rotation.outcome, rotation.family) == (Outcome.REUSED, digest_prefix(first))
    assert store.owner_of(chain[-1]) is None


def test_a_forgotten_token_presented_for_another_user_changes_nothing(make_store):
    store = make_store()
    stolen = new_refresh_token()
    store.issue(stolen, "alice")
    chain = thiefs_flush(store, stolen)
    rotation = store.rotate(stolen, successor_of(stolen), "bob")
    assert (rotation.outcome, rotation.family) == (Outcome.OTHER_USER, "")
    assert store.owner_of(chain[-1]) == "alice"


def test_a_retired_token_within_the_grace_replaces_its_unused_successor(make_store):
    store = make_store(reuse_grace=10)
    token = new_refresh_token()
    store.issue(token, "alice")
    lost = rotated(store, token)  # the answer that never reached the client
    store.clock.advance(9.9)
    retry = new_refresh_token()
    rotation = store.rotate(token, retry, "alice")
    assert (rotation.outcome, rotation.family) == (Outcome.RETRIED, digest_prefix(token))
    assert rotation.succeeded
    assert (store.owner_of(lost), store.owner_of(retry)) == (None, "alice")
    again = new_refresh_token()  # the grace counts from the first rotation, not the last retry
    assert store.rotate(token, again, "alice").outcome is Outcome.RETRIED
    assert [store.owner_of(t) for t in (lost, retry, again)] == [None, None, "alice"]
    assert store.count() == 1
    # the replaced successor is retired, not forgotten: whoever holds it reveals the theft
    assert store.rotate(lost, new_refresh_token(), "alice").outcome is Outcome.REUSED
    assert store.owner_of(again) is None


def test_a_replaced_successor_is_reuse_even_once_its_sibling_was_rotated(make_store):
    # the victim rotates T0 (S1); a thief replays T0 within the grace (S2) and rotates S2
    # (S3): S1 is no parent of the live token, so presenting it is reuse, not a retry
    store = make_store(reuse_grace=5)
    first = new_refresh_token()
    store.issue(first, "alice")
    victims = rotated(store, first)
    thiefs = new_refresh_token()
    assert store.rotate(first, thiefs, "alice").outcome is Outcome.RETRIED
    thiefs_next = rotated(store, thiefs)
    rotation = store.rotate(victims, new_refresh_token(), "alice")
    assert (rotation.outcome, rotation.family) == (Outcome.REUSED, digest_prefix(first))
    assert store.owner_of(thiefs_next) is None
    assert store.count() == 0


def test_a_retry_replaces_only_its_own_unused_successor(make_store):
    store = make_store(reuse_grace=5)
    first = new_refresh_token()
    store.issue(first, "alice")
    second = rotated(store, first)
    third = rotated(store, second)  # second's successor, unused: second may retry
    retry = new_refresh_token()
    assert store.rotate(second, retry, "alice").outcome is Outcome.RETRIED
    assert (store.owner_of(third), store.owner_of(retry)) == (None, "alice")
    # first's successor (second) was used: first is reuse, though a live token is at its
    # successor's generation + 1
    assert store.rotate(first, new_refresh_token(), "alice").outcome is Outcome.REUSED
    assert store.owner_of(retry) is None


RACE_TRIALS = 20


def test_rotations_and_retries_racing_leave_one_lineage(make_store):
    # after T0 -> S1, thieves retry T0 and victims present S1, each then rotating what it
    # got: whatever the order, only one side's lineage succeeds, and one token is live
    store = make_store(reuse_grace=5)
    for _ in range(RACE_TRIALS):
        first = new_refresh_token()
        store.issue(first, "alice")
        second = rotated(store, first)
        start = threading.Barrier(THREADS, timeout=30)

        def present(
            worker: int, first: str = first, second: str = second, start=start
        ) -> tuple[str, str]:
            side = "victim" if worker % 2 else "thief"
            token, successes = second if worker % 2 else first, 0
            start.wait()
            for _ in range(2):
                successor = new_refresh_token()
                if not store.rotate(token, successor, "alice").succeeded:
                    break
                token, successes = successor, successes + 1
            return side, token if successes else ""

        with ThreadPoolExecutor(THREADS) as pool:
            answers = list(pool.map(present, range(THREADS)))
        assert len({side for side, token in answers if token}) <= 1
        live = [token for _, token in answers if token and store.owner_of(token)]
        assert len(set(live)) <= 1
        assert store.count() == len(set(live))
        store.revoke_all("alice")


def test_without_a_grace_a_reuse_is_caught_even_from_a_clock_read_earlier(make_store):
    # a concurrent refresh may read its clock a moment before another one rotates
    store = make_store()
    token = new_refresh_token()
    store.issue(token, "alice")
    successor = rotated(store, token)
    store.clock.advance(-0.5)
    assert store.rotate(token, new_refresh_token(), "alice").outcome is Outcome.REUSED
    assert store.owner_of(successor) is None


def test_the_grace_ends_exactly_grace_seconds_after_the_rotation(make_store):
    store = make_store(reuse_grace=10)
    token = new_refresh_token()
    store.issue(token, "alice")
    successor = rotated(store, token)
    store.clock.advance(10)
    assert store.rotate(token, new_refresh_token(), "alice").outcome is Outcome.REUSED
    assert store.owner_of(successor) is None


def test_the_grace_is_over_once_the_successor_was_used(make_store):
    store = make_store(reuse_grace=10)
    token = new_refresh_token()
    store.issue(token, "alice")
    newest = rotated(store, rotated(store, token))
    assert store.rotate(token, new_refresh_token(), "alice").outcome is Outcome.REUSED
    assert store.owner_of(newest) is None


def test_without_grace_a_retired_token_is_reuse_at_once(make_store):
    store = make_store()
    token = new_refresh_token()
    store.issue(token, "alice")
    successor = rotated(store, token)
    assert store.rotate(token, new_refresh_token(), "alice").outcome is Outcome.REUSED
    assert store.owner_of(successor) is None


def test_revoking_the_live_token_forgets_its_family_and_is_no_reuse(make_store):
    store = make_store()
    first = new_refresh_token()
    store.issue(first, "alice")
    third = rotated(store, rotated(store, first))
    revocation = store.revoke(third)
    assert revocation == Revocation(True, False, digest_prefix(first), "alice")
    assert store.rotate(first, new_refresh_token(), "alice").outcome is Outcome.UNKNOWN
    assert store.count() == 0
    assert stored_digests(store) == set()
    assert lineage_digest(first) not in stored_contents(store)


@pytest.mark.parametrize(("generations", "revoked"), [(1, 0), (2, 0), (2, 1), (5, 3)])
def test_revoking_a_retired_member_revokes_its_whole_family_as_reuse(
    make_store, generations, revoked
):
    store = make_store()
    chain = [new_refresh_token()]
    store.issue(chain[0], "alice")
    other_family = new_refresh_token()
    store.issue(other_family, "alice")
    for _ in range(generations):
        chain.append(rotated(store, chain[-1]))
    revocation = store.revoke(chain[revoked])
    assert revocation == Revocation(True, True, digest_prefix(chain[0]), "alice")
    assert all(store.owner_of(token) is None for token in chain)
    for token in chain:  # the family is forgotten, and its lineage with it
        assert store.rotate(token, successor_of(token), "alice").outcome is Outcome.UNKNOWN
    assert store.revoke(chain[revoked]) == Revocation(False)
    assert stored_digests(store) == {token_digest(other_family)}
    assert lineage_digest(chain[0]) not in stored_contents(store)


def test_revoking_a_token_the_family_forgot_revokes_the_family_as_reuse(make_store):
    store = make_store()
    stolen, other_family = new_refresh_token(), new_refresh_token()
    store.issue(stolen, "alice")
    store.issue(other_family, "alice")
    chain = thiefs_flush(store, stolen)
    revocation = store.revoke(stolen)
    assert revocation == Revocation(True, True, digest_prefix(stolen), "alice")
    assert all(store.owner_of(token) is None for token in chain)
    assert stored_digests(store) == {token_digest(other_family)}
    assert store.revoke(stolen) == Revocation(False)


def test_revoking_a_token_the_grace_replaced_revokes_the_family(make_store):
    # the owner rotates T0 (S1); a thief replays T0 within the grace (S2), which retires
    # S1, then revokes S1 to erase it: that revokes the thief's S2 too
    store = make_store(reuse_grace=10)
    first = new_refresh_token()
    store.issue(first, "alice")
    owners = rotated(store, first)
    thiefs = successor_of(first)
    assert store.rotate(first, thiefs, "alice").outcome is Outcome.RETRIED
    assert store.revoke(owners) == Revocation(True, True, digest_prefix(first), "alice")
    assert store.owner_of(thiefs) is None
    assert store.count() == 0


def test_a_family_that_expired_is_no_reuse_and_its_lineage_names_nothing(make_store):
    store = make_store(lifetime=100)
    stolen = new_refresh_token()
    store.issue(stolen, "alice")
    thiefs_flush(store, stolen)
    store.clock.advance(100)
    assert store.rotate(stolen, successor_of(stolen), "alice").outcome is Outcome.UNKNOWN
    assert store.revoke(stolen) == Revocation(False)


LINEAGE_SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
alphabet_text = st.text(st.sampled_from(REFRESH_TOKEN_ALPHABET), min_size=42, max_size=42)


@LINEAGE_SETTINGS
@given(presented=st.one_of(st.text(max_size=64), alphabet_text))
def test_a_token_of_another_lineage_is_unknown_and_ends_no_family(make_store, presented):
    store = make_store()
    first = new_refresh_token()
    store.issue(first, "alice")
    live = rotated(store, rotated(store, first))
    if presented[:LINEAGE_LENGTH] == first[:LINEAGE_LENGTH]:
        return  # the next test's
    assert store.rotate(presented, successor_of(presented), "alice").outcome is Outcome.UNKNOWN
    assert store.revoke(presented) == Revocation(False)
    assert store.owner_of(live) == "alice"
    store.revoke_all("alice")


@LINEAGE_SETTINGS
@given(rest=alphabet_text)
def test_any_token_of_a_live_familys_lineage_is_reuse(make_store, rest):
    # only a holder of one of its tokens knows a family's lineage
    store = make_store()
    first = new_refresh_token()
    store.issue(first, "alice")
    live = rotated(store, rotated(store, first))
    presented = first[:LINEAGE_LENGTH] + rest[LINEAGE_LENGTH:]
    if presented in (first, live):
        return  # a member of the family, whose own record answers
    revocation = store.revoke(presented)
    assert revocation == Revocation(True, True, digest_prefix(first), "alice")
    assert store.owner_of(live) is None


def test_revoke_all_and_revoke_digest_reach_rotated_families(make_store):
    store = make_store()
    token = new_refresh_token()
    store.issue(token, "alice")
    successor = rotated(store, rotated(store, token))
    store.issue(new_refresh_token(), "alice")
    assert store.revoke_digest(digest_prefix(token)) == 0  # retired: not a live token
    assert store.revoke_all("alice") == 2
    assert store.rotate(token, new_refresh_token(), "alice").outcome is Outcome.UNKNOWN
    assert store.owner_of(successor) is None
    assert store.count() == 0
    assert stored_digests(store) == set()


def test_rotation_keeps_digests_only_never_a_token(make_store):
    store = make_store(reuse_grace=5, lifetime=3600, per_user=3)
    token = new_refresh_token()
    store.issue(token, "alice")
    successors = [rotated(store, token)]
    successors.append(new_refresh_token())
    assert store.rotate(token, successors[-1], "alice").outcome is Outcome.RETRIED
    contents = stored_contents(store)
    for presented in [token, *successors]:
        assert presented not in contents
        assert token_digest(presented) in contents


# --- bounded growth: per-user limit, lifetime, purge ---------------------------------


def test_the_token_over_the_per_user_limit_revokes_the_oldest(make_store):
    store = make_store(per_user=3)
    tokens = []
    ended = []
    for _ in range(5):
        tokens.append(new_refresh_token())
        ended.append(store.issue(tokens[-1], "alice").ended)
        store.clock.advance(1)
    assert ended == [0, 0, 0, 1, 1]  # each login over the limit ends the oldest session
    assert store.issue(new_refresh_token(), "bob").ended == 0
    assert [store.owner_of(token) for token in tokens] == [None, None, "alice", "alice", "alice"]
    assert [record.digest_prefix for record in store.tokens_of("alice")] == [
        digest_prefix(token) for token in tokens[2:]
    ]
    assert store.count() == 4


SAME_SECOND_TRIALS = 20


def test_same_second_logins_over_the_limit_evict_the_first_issued(make_store):
    # four logins in one second, one clock reading: the first issued goes, every time
    store = make_store(per_user=3)
    for _ in range(SAME_SECOND_TRIALS):
        tokens = [new_refresh_token() for _ in range(4)]
        for token in tokens:
            store.issue(token, "alice")
        assert [store.owner_of(token) for token in tokens] == [None, "alice", "alice", "alice"]
        assert [record.digest_prefix for record in store.tokens_of("alice")] == [
            digest_prefix(token) for token in tokens[1:]
        ]
        store.revoke_all("alice")


def test_a_same_second_rotation_makes_its_family_the_newest(make_store):
    store = make_store(per_user=2)
    for _ in range(SAME_SECOND_TRIALS):
        first, second = new_refresh_token(), new_refresh_token()
        store.issue(first, "alice")
        store.issue(second, "alice")
        successor = rotated(store, first)  # rotated last: second is now the oldest
        store.issue(new_refresh_token(), "alice")
        assert (store.owner_of(second), store.owner_of(successor)) == (None, "alice")
        store.revoke_all("alice")


def test_without_a_limit_a_user_holds_any_number_of_tokens(make_store):
    store = make_store()
    tokens = [new_refresh_token() for _ in range(30)]
    for token in tokens:
        store.issue(token, "alice")
    assert all(store.owner_of(token) == "alice" for token in tokens)


def test_a_rotated_family_counts_once_and_is_evicted_whole(make_store):
    store = make_store(per_user=2)
    first = new_refresh_token()
    store.issue(first, "alice")
    store.clock.advance(1)
    second = new_refresh_token()
    store.issue(second, "alice")
    store.clock.advance(1)
    first_successor = rotated(store, first)  # now the most recently issued
    store.clock.advance(1)
    third = new_refresh_token()
    store.issue(third, "alice")  # evicts `second`, the least recently issued or rotated
    assert [store.owner_of(t) for t in (second, first_successor, third)] == [None, "alice", "alice"]
    store.clock.advance(1)
    store.issue(new_refresh_token(), "alice")  # evicts first's family, history included
    assert store.owner_of(first_successor) is None
    assert store.rotate(first, new_refresh_token(), "alice").outcome is Outcome.UNKNOWN
    assert store.count() == 2


def test_expired_tokens_do_not_count_towards_the_limit(make_store):
    store = make_store(per_user=2, lifetime=60)
    old = new_refresh_token()
    store.issue(old, "alice")
    store.clock.advance(30)
    young = new_refresh_token()
    store.issue(young, "alice")
    store.clock.advance(30)  # `old` expires now
    newest = new_refresh_token()
    store.issue(newest, "alice")
    assert [store.owner_of(t) for t in (old, young, newest)] == [None, "alice", "alice"]


def test_concurrent_logins_of_one_user_never_exceed_the_limit(make_store):
    store = make_store(per_user=3, clock=SYSTEM_CLOCK)  # real time: threads issue in any order
    start = threading.Barrier(THREADS, timeout=30)

    def issue_some(worker: int) -> None:
        start.wait()
        for _ in range(10):
            store.issue(new_refresh_token(), "alice")

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(issue_some, range(THREADS)))
    assert len(store.tokens_of("alice")) == 3
    assert store.count() == 3


def test_a_token_is_unknown_from_the_second_its_lifetime_ends(make_store):
    store = make_store(lifetime=60)
    token = new_refresh_token()
    store.issue(token, "alice")
    store.clock.advance(59.999)
    assert store.owner_of(token) == "alice"
    assert [record.digest_prefix for record in store.tokens_of("alice")] == [digest_prefix(token)]
    store.clock.advance(0.001)
    assert store.owner_of(token) is None
    assert store.tokens_of("alice") == []
    assert store.count() == 0
    assert store.rotate(token, new_refresh_token(), "alice").outcome is Outcome.UNKNOWN
    store.clock.advance(1)
    assert store.owner_of(token) is None


def test_without_a_lifetime_a_token_never_expires(make_store):
    store = make_store()
    token = new_refresh_token()
    store.issue(token, "alice")
    store.clock.advance(10 * 365 * 86_400)
    assert store.owner_of(token) == "alice"
    assert store.purge_expired() == 0


def test_a_successor_inherits_the_familys_expiry(make_store):
    store = make_store(lifetime=100)
    token = new_refresh_token()
    store.issue(token, "alice")
    store.clock.advance(60)
    successor = rotated(store, token)
    store.clock.advance(39)
    successor = rotated(store, successor)
    assert store.owner_of(successor) == "alice"
    store.clock.advance(1)  # 100 s after the login, 40 s after the first rotation
    assert store.owner_of(successor) is None
    assert store.rotate(successor, new_refresh_token(), "alice").outcome is Outcome.UNKNOWN


def test_a_family_issued_before_the_lifetime_gets_one_at_its_next_rotation(make_store):
    token = new_refresh_token()
    make_store().issue(token, "alice")  # no lifetime then
    store = make_store(lifetime=100)
    store.clock.advance(1000)
    successor = rotated(store, token)
    store.clock.advance(99)
    assert store.owner_of(successor) == "alice"
    store.clock.advance(1)
    assert store.owner_of(successor) is None
    assert store.purge_expired() == 2  # its retired predecessor expired with it


def test_purge_forgets_expired_tokens_only_and_at_most_the_limit(make_store):
    store = make_store(lifetime=60)
    expiring = [new_refresh_token() for _ in range(5)]
    for token in expiring:
        store.issue(token, "alice")
    rotated(store, expiring[0])  # a family: two records
    store.clock.advance(30)
    living = new_refresh_token()
    store.issue(living, "alice")  # purges nothing yet
    lasting = new_refresh_token()
    make_store().issue(lasting, "bob")  # issued without a lifetime
    store.clock.advance(30)
    assert store.purge_expired(limit=4) == 4
    assert store.purge_expired(limit=4) == 2
    assert store.purge_expired(limit=4) == 0
    assert store.owner_of(living) == "alice"
    assert store.owner_of(lasting) == "bob"
    assert store.count() == 2
    assert stored_digests(store) == {token_digest(living), token_digest(lasting)}


def test_issue_and_rotation_purge_a_bounded_batch_of_expired_tokens(make_store):
    store = make_store(lifetime=60)
    for _ in range(40):
        store.issue(new_refresh_token(), "alice")
    store.clock.advance(60)
    token = new_refresh_token()
    store.issue(token, "bob")  # purges one batch (16) of the 40
    assert store.purge_expired(limit=100) == 24
    store.clock.advance(1)
    for _ in range(20):
        store.issue(new_refresh_token(), "carol")
    store.clock.advance(60)
    store.rotate(token, new_refresh_token(), "bob")  # expired itself, but purges a batch
    assert store.purge_expired(limit=100) == 5  # 20 + bob's one, less one batch of 16


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
                revoked.append((mine[n], store.revoke(mine[n]).known))
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


@pytest.mark.parametrize("grace", [0, 10])
def test_of_concurrent_rotations_of_one_token_exactly_one_rotates(make_store, grace):
    store = make_store(reuse_grace=grace)
    token = new_refresh_token()
    store.issue(token, "alice")
    successors = [new_refresh_token() for _ in range(THREADS)]
    start = threading.Barrier(THREADS, timeout=30)

    def rotate(successor: str) -> Outcome:
        start.wait()
        return store.rotate(token, successor, "alice").outcome

    with ThreadPoolExecutor(THREADS) as pool:
        outcomes = Counter(pool.map(rotate, successors))
    live = [successor for successor in successors if store.owner_of(successor) is not None]
    if grace:  # each retry replaces the unused successor: one survives
        assert outcomes == {Outcome.ROTATED: 1, Outcome.RETRIED: THREADS - 1}
        assert len(live) == 1
    else:  # the second finds it retired and revokes the family; the others find nothing
        assert outcomes == {Outcome.ROTATED: 1, Outcome.REUSED: 1, Outcome.UNKNOWN: THREADS - 2}
        assert live == []
    assert store.count() == len(live)


# --- denied signed tokens (a logged-out cookie token) ---------------------------------


def test_a_denied_digest_is_denied_on_every_store_of_it_until_its_time(make_store):
    store = make_store()
    other = make_store(clock=store.clock)  # two workers or hosts on one store
    denied, kept = token_digest("cookie token 1"), token_digest("cookie token 2")
    store.deny(denied, store.clock() + 60)
    assert (other.is_denied(denied), other.is_denied(kept)) == (True, False)
    assert store.count() == 0  # no refresh token
    store.clock.advance(59.9)
    assert other.is_denied(denied) is True
    store.clock.advance(0.1)  # its time: the token has expired, the entry with it
    assert (store.is_denied(denied), other.is_denied(denied)) == (False, False)


def test_several_digests_are_denied_if_any_of_them_is(make_store):
    store = make_store()
    first, second, third = (token_digest(f"cookie token {n}") for n in range(3))
    store.deny(second, store.clock() + 60)
    store.deny(third, store.clock() + 30)
    assert store.is_denied(first, second) is True
    assert store.is_denied(second, first, third) is True
    assert store.is_denied(first, token_digest("another")) is False
    store.clock.advance(45)  # the third's entry ended, the second's not
    assert (store.is_denied(first, third), store.is_denied(third, second)) == (False, True)


def test_a_deny_until_a_past_time_denies_nothing(make_store):
    store = make_store()
    store.deny(token_digest("expired cookie token"), store.clock() - 1)
    store.deny(token_digest("expiring cookie token"), store.clock())
    assert not store.is_denied(token_digest("expired cookie token"))
    assert not store.is_denied(token_digest("expiring cookie token"))


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
    if store_url.startswith("postgresql://"):  # a loopback port where nothing listens
        return f"postgresql://tokens:password@127.0.0.1:{free_port()}/tokens"
    server = request.getfixturevalue("redis_server")()
    server.stop()  # a port where nothing listens any more
    return server.url


@pytest.mark.parametrize("operation", OPERATIONS)
def test_unreachable_store_raises_store_unavailable_at_once(unreachable_store_url, operation):
    timeout = 30  # far longer than any answer: only a wait for it would come near it
    store = open_store(unreachable_store_url, timeout=timeout)
    started = time.monotonic()
    with pytest.raises(BackendUnavailable):
        OPERATIONS[operation](store)
    assert time.monotonic() - started < timeout  # refused at once, not after the timeout
    store.close()
