"""``flask tokens copy``: every token and deny entry moves from one store to another, and
behaves there as it did (refreshes, rotates, is caught when reused, expires)."""

from __future__ import annotations

import time

import pytest

from app.store import Outcome, RefreshTokenPolicy, open_store, successor_of, token_digest
from app.store.base import RETIRED_GENERATIONS_KEPT
from app.store.transfer import copy_tokens
from app.tokens import new_refresh_token
from tests.fixtures.stores import SERVER_MARKS

#: Each backend read from and written to (SQLite into Redis is read and written the same way).
PAIRS = [
    ("sqlite", "postgresql"),
    ("redis", "postgresql"),
    ("postgresql", "sqlite"),
    ("postgresql", "redis"),
]


def url_of(backend: str, request, tmp_path) -> str:
    if backend == "sqlite":
        (tmp_path / backend).mkdir()
        return f"sqlite:///{tmp_path / backend / 'refresh_tokens.sqlite3'}"
    return request.getfixturevalue("postgres_url" if backend == "postgresql" else "redis_url")


@pytest.mark.parametrize(
    ("source_backend", "target_backend"),
    [
        pytest.param(*pair, marks=[SERVER_MARKS[b] for b in pair if b in SERVER_MARKS])
        for pair in PAIRS
    ],
)
def test_every_token_moves_and_behaves_as_before(source_backend, target_backend, request, tmp_path):
    policy = RefreshTokenPolicy(lifetime=3600, reuse_grace=10)
    source = open_store(url_of(source_backend, request, tmp_path), timeout=5, policy=policy)
    target = open_store(url_of(target_backend, request, tmp_path), timeout=5, policy=policy)
    now = float(int(time.time()))
    for store in (source, target):
        store.clock = lambda: now
    plain = {f"user{n}": new_refresh_token() for n in range(3)}
    for username, token in plain.items():
        source.issue(token, username)
    first, second, third = new_refresh_token(), new_refresh_token(), new_refresh_token()
    source.issue(first, "alice")
    source.rotate(first, second, "alice")
    source.rotate(second, third, "alice")  # a family: two retired, one live
    expired = new_refresh_token()
    source.clock = lambda: now - 3600
    source.issue(expired, "bob")  # issued an hour ago: expired now
    source.clock = lambda: now
    source.deny(token_digest("cookie token"), now + 60)

    copied = copy_tokens(source, target)

    assert (copied.tokens, copied.live, copied.denied) == (6, 4, 1)
    assert target.count() == 4
    assert {username: target.owner_of(token) for username, token in plain.items()} == {
        username: username for username in plain
    }
    assert target.owner_of(expired) is None
    assert target.is_denied(token_digest("cookie token"))
    assert [r.digest_prefix for r in target.tokens_of("alice")] == [token_digest(third)[:12]]
    assert copy_tokens(source, target).tokens == 6  # again: nothing doubled
    assert target.count() == 4
    # the family goes on: a retry within the grace, then a reuse that revokes it all
    fourth = new_refresh_token()
    assert target.rotate(third, fourth, "alice").outcome is Outcome.ROTATED
    assert target.rotate(first, new_refresh_token(), "alice").outcome is Outcome.REUSED
    assert target.owner_of(fourth) is None
    # and expires when it did
    target.clock = lambda: now + 3600
    assert target.owner_of(plain["user0"]) is None
    source.close()
    target.close()


@pytest.mark.postgres
@pytest.mark.store("sqlite")
@pytest.mark.parametrize(
    ("source_backend", "target_backend"),
    [
        pytest.param(*pair, marks=[SERVER_MARKS[b] for b in pair if b in SERVER_MARKS])
        for pair in PAIRS
    ],
)
def test_a_familys_lineage_moves_with_it(source_backend, target_backend, request, tmp_path):
    policy = RefreshTokenPolicy(lifetime=3600)
    source = open_store(url_of(source_backend, request, tmp_path), timeout=5, policy=policy)
    target = open_store(url_of(target_backend, request, tmp_path), timeout=5, policy=policy)
    first = new_refresh_token()
    source.issue(first, "alice")
    chain = [first]
    for _ in range(RETIRED_GENERATIONS_KEPT + 1):  # the first's own record is forgotten
        chain.append(successor_of(chain[-1]))
        assert source.rotate(chain[-2], chain[-1], "alice").outcome is Outcome.ROTATED

    copy_tokens(source, target)

    # the first is still known in the target by its family's lineage: reuse
    rotation = target.rotate(first, successor_of(first), "alice")
    assert (rotation.outcome, rotation.family) == (Outcome.REUSED, token_digest(first)[:12])
    assert target.owner_of(chain[-1]) is None
    assert target.revoke(first).known is False  # the lineage went with the family
    source.close()
    target.close()


def test_flask_tokens_copy_moves_the_apps_tokens_and_never_shows_the_url(make_app, postgres_url):
    app = make_app()  # the SQLite default
    client = app.test_client()
    tokens = client.post("/login", json={"username": "alice"}).json
    result = app.test_cli_runner().invoke(args=["tokens", "copy", "--to", postgres_url])
    assert result.exit_code == 0, result.output
    assert result.output == (
        "copied 1 refresh tokens (1 live, the others retired by rotation) and 0 deny entries\n"
    )
    moved = make_app(TOKEN_STORE_URL=postgres_url).test_client()
    body = {"username": "alice", "refreshToken": tokens["refreshToken"]}
    assert moved.post("/token", json=body).status_code == 200
    bad = postgres_url.replace("postgresql://", "postgresql://x:y@").replace(":5", ":notaport5")
    result = app.test_cli_runner().invoke(args=["tokens", "copy", "--to", bad])
    assert result.exit_code == 2
    assert "not a usable PostgreSQL URL" in result.output
    assert "s3cret" not in result.output
