"""``flask tokens copy``: every token and deny entry moves from one store to another, and
behaves there as it did (refreshes, rotates, is caught when reused, expires); only into
an empty store, never onto the store itself, and the count is of what was written."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.auth.tokens import new_refresh_token
from app.backends import backend_at
from app.backends.interface import (
    RETIRED_GENERATIONS_KEPT,
    BackendUnavailable,
    IdleSession,
    LoginClient,
    Outcome,
    RefreshTokenPolicy,
    successor_of,
    token_digest,
)
from app.backends.transfer import CopyRefusedError, copy_tokens
from app.cli.tokens import COPY_TIMEOUT
from tests.helpers.clock import ManualClock
from tests.helpers.servers import free_port
from tests.helpers.stores import SERVER_MARKS, open_store

#: Every pair of backends, each way.
PAIRS = [
    (source, target)
    for source in ("sqlite", "redis", "postgresql")
    for target in ("sqlite", "redis", "postgresql")
    if source != target
]


#: What the refusals of a copy say.
SAME_STORE = "is the store copied from"
NOT_EMPTY = "holds refresh tokens or deny entries already"


def url_of(backend: str, request, tmp_path) -> str:
    if backend == "sqlite":
        (tmp_path / backend).mkdir()
        return f"sqlite:///{tmp_path / backend / 'refresh_tokens.sqlite3'}"
    return request.getfixturevalue("postgres_url" if backend == "postgresql" else "redis_url")


def store_pairs(pairs: list[tuple[str, str]]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize(
        ("source_backend", "target_backend"),
        [
            pytest.param(*pair, marks=[SERVER_MARKS[b] for b in pair if b in SERVER_MARKS])
            for pair in pairs
        ],
    )


def empty(backend: str, url: str) -> None:
    """Empty the store at ``url`` as docs/stores.md ("Moving tokens") tells an operator."""
    if backend == "sqlite":  # the file, with its -wal and -shm
        path = url.removeprefix("sqlite:///")
        for name in (path, f"{path}-wal", f"{path}-shm"):
            Path(name).unlink(missing_ok=True)
    elif backend == "postgresql":
        import psycopg

        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("TRUNCATE refresh_tokens, denied_tokens, cutoffs")
    else:
        import redis

        with redis.Redis.from_url(url) as client:
            for key in client.scan_iter("rt:*"):
                client.unlink(key)


@store_pairs(PAIRS)
def test_every_token_moves_and_behaves_as_before(source_backend, target_backend, request, tmp_path):
    policy = RefreshTokenPolicy(lifetime=3600, reuse_grace=10)
    clock = ManualClock()  # the two stores' hosts agree on the time
    now = clock()
    source = open_store(
        url_of(source_backend, request, tmp_path), timeout=5, policy=policy, clock=clock
    )
    target = open_store(
        url_of(target_backend, request, tmp_path), timeout=5, policy=policy, clock=clock
    )
    plain = {f"user{n}": new_refresh_token() for n in range(3)}
    for username, token in plain.items():
        source.issue(token, username)
    first, second, third = new_refresh_token(), new_refresh_token(), new_refresh_token()
    source.issue(first, "alice")
    source.rotate(first, second, "alice")
    source.rotate(second, third, "alice")  # a family: two retired, one live
    expired = new_refresh_token()
    clock.advance(-3600)
    source.issue(expired, "bob")  # issued an hour ago: expired now
    clock.advance(3600)
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
    with pytest.raises(CopyRefusedError, match=NOT_EMPTY):
        copy_tokens(source, target)  # again: refused, nothing doubled
    assert target.count() == 4
    # the family goes on: a retry within the grace, then a reuse that revokes it all
    fourth = new_refresh_token()
    assert target.rotate(third, fourth, "alice").outcome is Outcome.ROTATED
    assert target.rotate(first, new_refresh_token(), "alice").outcome is Outcome.REUSED
    assert target.owner_of(fourth) is None
    # and expires when it did
    clock.advance(3600)
    assert target.owner_of(plain["user0"]) is None
    source.close()
    target.close()


@store_pairs(PAIRS)
def test_sessions_and_cutoffs_move_and_behave_as_before(
    source_backend, target_backend, request, tmp_path
):
    policy = RefreshTokenPolicy(idle_timeout=600)
    clock = ManualClock(1_800_000_000.0)
    source = open_store(url_of(source_backend, request, tmp_path), 5, policy=policy, clock=clock)
    target = open_store(url_of(target_backend, request, tmp_path), 5, policy=policy, clock=clock)
    first, other = new_refresh_token(), new_refresh_token()
    source.issue(first, "alice", LoginClient("198.51.100.7", "agent/1"))
    source.issue(new_refresh_token(), "bob")
    source.log_out_everywhere("bob", int(clock()))
    clock.advance(61)
    source.issue(other, "alice")
    rotated = successor_of(first)
    source.rotate(first, rotated, "alice")
    before = source.sessions_of("alice").sessions

    copied = copy_tokens(source, target)

    assert copied.cutoffs == 1
    assert target.sessions_of("alice").sessions == before
    assert target.cutoffs(0) == {"bob": int(clock()) - 61}
    assert target.log_out_everywhere("bob", int(clock()) - 61) == 0  # done already
    session = next(s for s in before if s.address == "198.51.100.7")
    assert target.end_session("alice", session.id)
    assert target.owner_of(rotated) is None
    clock.advance(660)  # other: idle since the end of its login's minute
    assert target.owner_of(other) == IdleSession("alice")
    assert target.owner_of(other) is None  # ended
    source.close()
    target.close()


@store_pairs(PAIRS)
def test_the_per_user_limit_evicts_after_a_copy_as_before_even_within_one_second(
    source_backend, target_backend, request, tmp_path
):
    policy = RefreshTokenPolicy(per_user=3, lifetime=3600, reuse_grace=10)
    clock = ManualClock()  # one second: only the order of issue tells the tokens apart
    source = open_store(url_of(source_backend, request, tmp_path), 5, policy=policy, clock=clock)
    target = open_store(url_of(target_backend, request, tmp_path), 5, policy=policy, clock=clock)
    tokens = [new_refresh_token() for _ in range(3)]
    for token in tokens:
        source.issue(token, "alice")
    rotated = successor_of(tokens[1])
    source.rotate(tokens[1], rotated, "alice")  # the newest now: it was rotated last
    expected = [r.digest_prefix for r in source.tokens_of("alice")]

    copy_tokens(source, target)

    assert [r.digest_prefix for r in target.tokens_of("alice")] == expected
    newer = new_refresh_token()
    target.issue(newer, "alice")  # one too many: the oldest goes, as it would have
    assert [target.owner_of(t) for t in (tokens[0], tokens[2], rotated, newer)] == [
        None, "alice", "alice", "alice",
    ]  # fmt: skip
    # the grace and the family came over too: a retry of the rotated token, then reuse
    retry = successor_of(tokens[1])
    assert target.rotate(tokens[1], retry, "alice").outcome is Outcome.RETRIED
    assert target.owner_of(rotated) is None
    assert target.rotate(rotated, successor_of(rotated), "alice").outcome is Outcome.REUSED
    assert target.owner_of(retry) is None
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


@pytest.mark.postgres
@pytest.mark.store("sqlite")
def test_flask_tokens_copy_moves_the_apps_tokens_and_never_shows_the_url(make_app, postgres_url):
    app = make_app()  # the SQLite default
    client = app.test_client()
    tokens = client.post("/login", json={"username": "alice"}).json
    result = app.test_cli_runner().invoke(args=["tokens", "copy", "--to", postgres_url])
    assert result.exit_code == 0, result.output
    assert result.output == (
        "copied 1 refresh tokens (1 live, the others retired by rotation), 0 deny entries"
        " and 0 users' cut-offs\n"
    )
    moved = make_app(TOKEN_STORE_URL=postgres_url).test_client()
    body = {"username": "alice", "refreshToken": tokens["refreshToken"]}
    assert moved.post("/token", json=body).status_code == 200
    bad = postgres_url.replace("postgresql://", "postgresql://x:y@").replace(":5", ":notaport5")
    result = app.test_cli_runner().invoke(args=["tokens", "copy", "--to", bad])
    assert result.exit_code == 2
    assert "not a usable PostgreSQL URL" in result.output
    assert "s3cret" not in result.output


@pytest.mark.store("sqlite")
def test_flask_tokens_copy_waits_on_both_stores_with_its_own_timeout(
    make_app, tmp_path, monkeypatch
):
    app = make_app(TOKEN_STORE_TIMEOUT="0.5")
    app.test_client().post("/login", json={"username": "alice"})
    opened = []

    def spied(url, timeout, *args, **options):
        opened.append(timeout)
        return backend_at(url, timeout, *args, **options)

    monkeypatch.setattr(sys.modules["app.cli.tokens"], "backend_at", spied)
    target = f"sqlite:///{tmp_path / 'target' / 'tokens.sqlite3'}"
    (tmp_path / "target").mkdir()
    result = app.test_cli_runner().invoke(args=["tokens", "copy", "--to", target])
    assert result.exit_code == 0, result.output
    assert opened == [COPY_TIMEOUT, COPY_TIMEOUT]  # not the requests' TOKEN_STORE_TIMEOUT


@store_pairs(PAIRS)
def test_a_second_copy_is_refused_and_one_into_the_emptied_target_has_the_sources_state(
    source_backend, target_backend, request, tmp_path
):
    policy = RefreshTokenPolicy(lifetime=3600)  # no grace: a reuse revokes the family
    source_url, target_url = (
        url_of(b, request, tmp_path) for b in (source_backend, target_backend)
    )
    source = open_store(source_url, timeout=5, policy=policy)
    target = open_store(target_url, timeout=5, policy=policy)
    kept, revoked = new_refresh_token(), new_refresh_token()
    source.issue(kept, "carol")
    source.issue(revoked, "carol")
    first, second, third = new_refresh_token(), new_refresh_token(), new_refresh_token()
    source.issue(first, "alice")
    source.rotate(first, second, "alice")
    one, two = new_refresh_token(), new_refresh_token()
    source.issue(one, "bob")
    source.rotate(one, two, "bob")
    source.deny(token_digest("cookie token"), source.clock() + 600)
    assert copy_tokens(source, target).tokens == 6
    # the service goes on with the source: a revoke, a rotation, a reuse (bob's family)
    assert source.revoke(revoked)
    assert source.rotate(second, third, "alice").outcome is Outcome.ROTATED
    assert source.rotate(one, new_refresh_token(), "bob").outcome is Outcome.REUSED

    with pytest.raises(CopyRefusedError, match=NOT_EMPTY) as refused:
        copy_tokens(source, target)

    assert "\n" not in str(refused.value)
    assert target.count() == 4  # nothing written: kept, revoked, second, two as copied first
    target.close()
    empty(target_backend, target_url)
    target = open_store(target_url, timeout=5, policy=policy)
    copied = copy_tokens(source, target)
    assert (copied.tokens, copied.live, copied.denied) == (4, 2, 1)  # kept, first..third
    assert [
        target.owner_of(token) for token in (kept, revoked, first, second, third, one, two)
    ] == ["carol", None, None, None, "alice", None, None]
    assert target.is_denied(token_digest("cookie token"))
    # the retirement came over: presenting second again is a reuse, and revokes alice's family
    assert target.rotate(second, new_refresh_token(), "alice").outcome is Outcome.REUSED
    assert target.owner_of(third) is None
    source.close()
    target.close()


@store_pairs([("postgresql", "sqlite"), ("sqlite", "redis"), ("sqlite", "postgresql")])
def test_the_count_is_of_the_tokens_written(
    source_backend, target_backend, request, tmp_path, monkeypatch
):
    policy = RefreshTokenPolicy(lifetime=3600)
    source = open_store(url_of(source_backend, request, tmp_path), timeout=5, policy=policy)
    target = open_store(url_of(target_backend, request, tmp_path), timeout=5, policy=policy)
    live, other, first, second = (new_refresh_token() for _ in range(4))
    source.issue(live, "carol")
    source.issue(other, "carol")
    source.issue(first, "alice")
    source.rotate(first, second, "alice")  # first retired, second live
    read = source.export

    def read_while_another_copy_writes():
        # after the target was found empty, another copy gives it a live and a retired
        # token of the source's before this one writes them
        target.issue(live, "carol")
        target.issue(first, "alice")
        yield from read()

    monkeypatch.setattr(source, "export", read_while_another_copy_writes)

    copied = copy_tokens(source, target)

    assert (copied.tokens, copied.live) == (2, 2)  # other and second: the two written
    assert target.count() == 4
    source.close()
    target.close()


#: Ways of reaching the folder of the file (``store``) from the working folder.
DETOURS = st.lists(st.sampled_from(["./", "store/../", "link/../", "store/./../"]), max_size=3)
#: The file by name, through a symbolic link to its folder, to itself, or by a hard link.
NAMES = st.sampled_from(
    ["store/tokens.sqlite3", "link/tokens.sqlite3", "store/symlink.sqlite3", "store/hard.sqlite3"]
)


@pytest.fixture
def sqlite_store(tmp_path, monkeypatch):
    """Return a SQLite store with one token, in ``store/`` of the working folder, with a
    symbolic link to the folder (``link``), one to the file, and a hard link to it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "store").mkdir()
    store = open_store(f"sqlite:///{tmp_path / 'store' / 'tokens.sqlite3'}", timeout=5)
    store.issue(new_refresh_token(), "alice")
    (tmp_path / "link").symlink_to(tmp_path / "store")
    (tmp_path / "store" / "symlink.sqlite3").symlink_to(tmp_path / "store" / "tokens.sqlite3")
    os.link(tmp_path / "store" / "tokens.sqlite3", tmp_path / "store" / "hard.sqlite3")
    yield store
    store.close()


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(absolute=st.booleans(), detours=DETOURS, name=NAMES)
def test_a_sqlite_store_is_never_copied_onto_itself(sqlite_store, absolute, detours, name):
    spelled = ("" if not absolute else f"{os.getcwd()}/") + "".join(detours) + name
    itself = open_store(f"sqlite:///{spelled}", timeout=5)

    with pytest.raises(CopyRefusedError, match=SAME_STORE):
        copy_tokens(sqlite_store, itself)

    itself.close()
    assert sqlite_store.count() == 1


def test_another_sqlite_file_beside_it_is_copied_into(sqlite_store):
    other = open_store("sqlite:///link/../store/other.sqlite3", timeout=5)
    assert copy_tokens(sqlite_store, other).tokens == 1
    assert other.count() == 1
    other.close()


def test_an_empty_store_is_not_copied_onto_itself_either(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = open_store("sqlite:///tokens.sqlite3", timeout=5)
    with pytest.raises(CopyRefusedError, match=SAME_STORE):
        copy_tokens(store, open_store(f"sqlite:///{tmp_path}/tokens.sqlite3", timeout=5))
    store.close()


@pytest.mark.redis
def test_a_redis_store_is_never_copied_onto_itself(redis_server, tmp_path):
    socket = tmp_path / "redis.sock"
    server = redis_server("--unixsocket", str(socket), "--unixsocketperm", "700")
    source = open_store(server.url, timeout=5)
    source.issue(new_refresh_token(), "alice")
    port = server.port
    for spelled in (
        f"redis://127.0.0.1:{port}/0",
        f"redis://127.0.0.1:{port}",  # database 0 by default
        f"redis://localhost:{port}?db=0",
        f"redis://127.0.0.1:{port}/0?socket_keepalive=true",
        f"unix://{socket}",
        f"unix://{socket}?db=0",
    ):
        itself = open_store(spelled, timeout=5)
        with pytest.raises(CopyRefusedError, match=SAME_STORE):
            copy_tokens(source, itself)
        itself.close()
    with server.client() as client:
        assert list(client.scan_iter("rt:copy-probe:*")) == []  # no probe left
    other = open_store(f"unix://{socket}?db=1", timeout=5)  # another database: another store
    assert copy_tokens(source, other).tokens == 1
    assert other.count() == 1
    source.close()
    other.close()


@pytest.mark.redis
def test_a_redis_target_that_does_not_answer_is_named_in_the_copys_error(redis_url):
    source = open_store(redis_url, timeout=5)
    source.issue(new_refresh_token(), "alice")
    down = f"redis://127.0.0.1:{free_port()}/0"
    target = open_store(down, timeout=1)
    with pytest.raises(BackendUnavailable, match=re.escape("Redis store 127.0.0.1:")) as error:
        copy_tokens(source, target)
    assert target.location in str(error.value)
    assert source.location not in str(error.value)
    source.close()
    target.close()


def test_a_sqlite_file_that_cannot_be_compared_is_one_error_line(sqlite_store, monkeypatch):
    other = open_store("sqlite:///link/../store/other.sqlite3", timeout=5)
    other.ping()

    def denied(*paths):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os.path, "samefile", denied)
    with pytest.raises(BackendUnavailable, match="Permission denied"):
        copy_tokens(sqlite_store, other)
    other.close()


@pytest.mark.postgres
def test_a_postgresql_store_is_never_copied_onto_itself(session_postgres, postgres_url):
    source = open_store(postgres_url, timeout=5)
    source.issue(new_refresh_token(), "alice")
    port, folder = session_postgres.port, session_postgres.folder
    for spelled in (
        postgres_url,
        postgres_url.replace("127.0.0.1", "localhost"),
        postgres_url.replace("postgresql://", "postgres://"),
        f"postgresql://tokens@127.0.0.1:{port}/tokens?application_name=elsewhere",
        f"postgresql://tokens@/tokens?host={folder}&port={port}",  # the Unix socket
        f"postgresql:///tokens?host={folder}&port={port}&user=tokens",
    ):
        itself = open_store(spelled, timeout=5)
        with pytest.raises(CopyRefusedError, match=SAME_STORE):
            copy_tokens(source, itself)
        itself.close()
    with session_postgres.admin() as admin:
        admin.execute("DROP DATABASE IF EXISTS copy_target")
    other = open_store(session_postgres.create_database("copy_target"), timeout=5)
    assert copy_tokens(source, other).tokens == 1  # another database of the same server
    assert other.count() == 1
    other.close()
    source.close()


@pytest.mark.postgres
@pytest.mark.store("sqlite")
def test_flask_tokens_copy_refuses_a_second_run_and_the_services_own_store(
    make_app, postgres_url, monkeypatch
):
    from tests.helpers.postgres_server import PASSWORD

    app = make_app()  # the SQLite default
    app.test_client().post("/login", json={"username": "alice"})
    cli = app.test_cli_runner()
    assert cli.invoke(args=["tokens", "copy", "--to", postgres_url]).exit_code == 0

    again = cli.invoke(args=["tokens", "copy", "--to", postgres_url])

    assert again.exit_code == 1
    assert again.stdout == ""
    place = postgres_url.rsplit("@", 1)[1]  # 127.0.0.1:<port>/tokens
    assert again.stderr == (
        f"Error: the target {place} holds refresh tokens or deny entries already, and a copy"
        ' goes into an empty store only: empty it (docs/stores.md, "Moving tokens") and copy'
        " again\n"
    )
    assert PASSWORD not in again.output
    assert "s3cret" not in again.output
    path = app.extensions["token_store"].path  # the service's own file, spelled relatively
    monkeypatch.chdir(os.path.dirname(path))
    itself = f"sqlite:///./{os.path.basename(path)}"

    onto_itself = cli.invoke(args=["tokens", "copy", "--to", itself])

    assert onto_itself.exit_code == 1
    assert onto_itself.stderr == (
        f"Error: the target {path} is the store copied from (TOKEN_STORE_URL): give --to"
        " another store\n"
    )
    with app.app_context():
        assert app.extensions["token_store"].count() == 1
