"""What only the Redis store has: its keys, its URLs, its timeouts and its error mapping."""

from __future__ import annotations

import logging
import subprocess
import time

import pytest
import redis
from redis import exceptions
from redis.connection import AbstractConnection

from app import create_app
from app.auth.tokens import new_refresh_token
from app.backends.interface import (
    BackendUnavailable,
    Outcome,
    RefreshTokenPolicy,
    successor_of,
    to_the_minute,
    token_digest,
)
from app.config.parsers import ConfigError
from tests.helpers.clock import ManualClock
from tests.helpers.servers import free_port, wait_until
from tests.helpers.stores import OPERATIONS, open_store
from tests.helpers.tools import require_tool, which

pytestmark = pytest.mark.redis


@pytest.fixture
def store(redis_url):
    store = open_store(redis_url, timeout=2)
    yield store
    store.close()


def test_keys_hold_digests_and_never_expire(store, session_redis):
    token = new_refresh_token()
    store.issue(token, "a:b")
    digest = token_digest(token)
    with session_redis.client() as client:
        assert sorted(client.keys("*")) == ["rt:digests", f"rt:token:{digest}", "rt:user:a:b"]
        assert all(client.ttl(key) == -1 for key in client.keys("*"))  # valid until revoked
        assert client.hgetall(f"rt:token:{digest}")["username"] == "a:b"


def test_a_login_after_redis_forgot_its_scripts_loads_them_again(store, session_redis):
    first, second = new_refresh_token(), new_refresh_token()
    store.issue(first, "alice")
    with session_redis.client() as client:
        client.script_flush()  # what a restart without the script cache leaves
        store.issue(second, "alice")
        assert client.hgetall(f"rt:token:{token_digest(second)}")["username"] == "alice"
    assert store.owner_of(second) == "alice"
    assert [record.digest_prefix for record in store.tokens_of("alice")] == [
        token_digest(token)[:12] for token in (first, second)
    ]


def test_revoking_the_last_token_leaves_no_key_behind(store, session_redis):
    tokens = [new_refresh_token() for _ in range(3)]
    for token in tokens:
        store.issue(token, "alice")
    store.revoke(tokens[0])
    store.revoke_digest(token_digest(tokens[1])[:12])
    store.revoke_all("alice")
    with session_redis.client() as client:
        assert client.keys("*") == []


def all_keys(client) -> dict[str, object]:
    """Return every key with its contents (hash fields or sorted-set members)."""
    contents: dict[str, object] = {}
    for key in client.keys("*"):
        if client.type(key) == "hash":
            contents[key] = client.hgetall(key)
        elif client.type(key) == "string":
            contents[key] = client.get(key)
        else:
            contents[key] = client.zrange(key, 0, -1)
    return contents


def test_a_token_with_a_lifetime_expires_in_redis_and_is_indexed_by_expiry(
    redis_url, session_redis
):
    store = open_store(redis_url, timeout=2, policy=RefreshTokenPolicy(lifetime=3600))
    token = new_refresh_token()
    store.issue(token, "alice")
    digest = token_digest(token)
    with session_redis.client() as client:
        assert 3590_000 < client.pttl(f"rt:token:{digest}") <= 3600_000
        assert client.zrange("rt:expiring", 0, -1) == [digest + "alice"]
        assert client.ttl("rt:user:alice") == -1  # shared with tokens of other expiries
    store.close()


def test_expired_tokens_leave_no_member_behind_in_any_index(redis_url, session_redis):
    start = time.time()
    clock = ManualClock(start)
    store = open_store(
        redis_url,
        timeout=2,
        policy=RefreshTokenPolicy(lifetime=60, per_user=5, reuse_grace=5),
        clock=clock,
    )
    tokens = [new_refresh_token() for _ in range(6)]
    for n, token in enumerate(tokens):
        store.issue(token, f"user{n % 2}")
    successor = new_refresh_token()
    store.rotate(tokens[0], successor, "user0")  # a family key and a retired token
    clock.advance(60)
    bob = token_digest(fresh := new_refresh_token())
    store.issue(fresh, "bob")  # purges a batch: all 7 expired records, none left dangling
    (session,) = store.sessions_of("bob").sessions
    with session_redis.client() as client:
        assert all_keys(client) == {
            "rt:digests": [bob],
            "rt:expiring": [bob + "bob"],
            "rt:user:bob": [bob],
            f"rt:token:{bob}": {"username": "bob", "issued_at": str(int(start) + 60),
                                "expires_at": str(int(start) + 120), "session": session.id,
                                "logged_in_at": str(int(start) + 60),
                                "last_used_at": str(to_the_minute(start + 60)),
                                "address": "", "user_agent": ""},
            "rt:schema": "2",
        }  # fmt: skip
    store.close()


def test_a_rotated_family_has_one_key_that_goes_with_it(store, session_redis):
    token = new_refresh_token()
    store.issue(token, "alice")
    successor = new_refresh_token()
    store.rotate(token, successor, "alice")
    family_key = f"rt:family:{token_digest(token)}"
    with session_redis.client() as client:
        assert client.zrange(family_key, 0, -1, withscores=True) == [
            (token_digest(token), 0.0),
            (token_digest(successor), 1.0),
        ]
        assert client.zrange("rt:digests", 0, -1) == [token_digest(successor)]
        assert client.ttl(family_key) == -1  # no lifetime: valid until revoked
    store.rotate(token, new_refresh_token(), "alice")  # reuse: the family is revoked
    with session_redis.client() as client:
        assert client.keys("*") == []


def test_a_successor_without_a_parent_field_is_no_retry_of_anything(redis_url, session_redis):
    # a successor written before ``parent`` was recorded: a retry of its retired
    # predecessor within the grace finds no successor of its own, and is reuse
    store = open_store(redis_url, timeout=2, policy=RefreshTokenPolicy(reuse_grace=5))
    first, second = new_refresh_token(), new_refresh_token()
    store.issue(first, "alice")
    store.rotate(first, second, "alice")
    with session_redis.client() as client:
        assert client.hget(f"rt:token:{token_digest(second)}", "parent") == token_digest(first)
        client.hdel(f"rt:token:{token_digest(second)}", "parent")
    assert store.rotate(first, new_refresh_token(), "alice").outcome is Outcome.REUSED
    assert store.owner_of(second) is None
    store.close()


def test_a_user_score_from_before_microseconds_sorts_first(redis_url, session_redis):
    store = open_store(redis_url, timeout=2, policy=RefreshTokenPolicy(per_user=2))
    old, before = new_refresh_token(), int(time.time())
    with session_redis.client() as client:  # as written when scores were whole seconds
        client.hset(
            f"rt:token:{token_digest(old)}",
            mapping={"username": "alice", "issued_at": int(time.time())},
        )
        client.zadd("rt:user:alice", {token_digest(old): int(time.time())})
        client.zadd("rt:digests", {token_digest(old): 0})
    newer = [new_refresh_token() for _ in range(2)]
    for token in newer:
        store.issue(token, "alice")
    assert [store.owner_of(token) for token in [old, *newer]] == [None, "alice", "alice"]
    records = store.tokens_of("alice")
    assert [record.digest_prefix for record in records] == [token_digest(t)[:12] for t in newer]
    assert all(before <= record.issued_at <= time.time() for record in records)
    store.close()


ERRORS = [
    exceptions.ConnectionError("Connection reset by peer"),
    exceptions.TimeoutError("Timeout reading from socket"),
    exceptions.BusyLoadingError("Redis is loading the dataset in memory"),
    exceptions.ReadOnlyError("You can't write against a read only replica."),
    exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'"),
    exceptions.ExecAbortError("Transaction discarded because of previous errors."),
    exceptions.NoPermissionError("this user has no permissions to run the 'hget' command"),
    exceptions.AuthenticationError("invalid username-password pair"),
    exceptions.ResponseError("MISCONF Redis is configured to save RDB snapshots"),
    exceptions.ResponseError("BUSY Redis is busy running a script"),
    ConnectionResetError(104, "Connection reset by peer"),
]


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize("error", ERRORS, ids=lambda error: type(error).__name__)
def test_every_redis_failure_is_store_unavailable(store, monkeypatch, operation, error):
    store.ping()  # connected: the failure comes with the reply

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(AbstractConnection, "read_response", fail)
    with pytest.raises(BackendUnavailable, match=type(error).__name__):
        OPERATIONS[operation](store)


@pytest.mark.parametrize("error", ERRORS, ids=lambda error: type(error).__name__)
def test_a_login_whose_script_reload_fails_is_store_unavailable(store, monkeypatch, error):
    store.ping()
    calls = []

    def fail(*args, **kwargs):
        calls.append(None)  # the cached script is gone, then its reload fails too
        raise exceptions.NoScriptError("NOSCRIPT No matching script.") if len(calls) == 1 else error

    monkeypatch.setattr(AbstractConnection, "read_response", fail)
    with pytest.raises(BackendUnavailable, match=r"^Redis store "):
        store.issue(new_refresh_token(), "alice")
    assert len(calls) >= 2  # the reload was tried, and failed


def test_read_only_replica_refuses_writes_as_unavailable(redis_server):
    server = redis_server()
    store = open_store(server.url, timeout=2)
    token = new_refresh_token()
    store.issue(token, "alice")
    stopped = redis_server()
    stopped.stop()
    with server.client() as client:
        client.replicaof("127.0.0.1", stopped.port)  # a replica of nobody: read-only
        try:
            with pytest.raises(BackendUnavailable, match="ReadOnlyError"):
                store.issue(new_refresh_token(), "alice")
            with pytest.raises(BackendUnavailable, match="ReadOnlyError"):
                store.revoke(token)
            assert store.owner_of(token) == "alice"  # reads still answer
        finally:
            client.replicaof("no", "one")
    assert store.revoke(token).known is True
    store.close()


def test_frozen_redis_answers_within_one_timeout_not_many(redis_server):
    server = redis_server()
    timeout = 0.5
    store = open_store(server.url, timeout=timeout)
    token = new_refresh_token()
    store.issue(token, "alice")  # a pooled connection, which the freeze leaves open
    server.freeze()
    try:
        for operation in OPERATIONS.values():
            started = time.monotonic()
            with pytest.raises(BackendUnavailable, match="TimeoutError"):  # it waited
                operation(store)
            # a retry would wait the timeout again: a generous bound still tells one from two
            assert time.monotonic() - started < 2 * timeout
    finally:
        server.thaw()
    assert store.owner_of(token) == "alice"  # and it answers again, with no reopening
    store.close()


def test_a_login_that_timed_out_on_a_frozen_redis_may_be_stored_and_counts_for_the_cap(
    redis_server,
):
    # what docs/stores.md says an unanswered login costs: Redis runs the script it had
    # read once it thaws, so the token is stored though nobody was given it, and under
    # REFRESH_TOKENS_PER_USER it takes a place, here revoking the user's oldest
    server = redis_server()
    store = open_store(server.url, timeout=0.5, policy=RefreshTokenPolicy(per_user=2))
    first, second, unanswered = (new_refresh_token() for _ in range(3))
    store.issue(first, "alice")
    store.issue(second, "alice")
    server.freeze()
    try:
        with pytest.raises(BackendUnavailable, match="TimeoutError"):
            store.issue(unanswered, "alice")
    finally:
        server.thaw()
    wait_until(lambda: store.owner_of(unanswered) == "alice", 10, "the script run after the thaw")
    assert (store.owner_of(first), store.owner_of(second)) == (None, "alice")
    store.close()


def test_restarted_redis_is_used_again_from_the_first_call(redis_server):
    server = redis_server("--appendonly", "yes")
    store = open_store(server.url, timeout=1)
    token = new_refresh_token()
    store.issue(token, "alice")
    server.stop()
    with pytest.raises(BackendUnavailable):
        store.owner_of(token)
    server.start()
    assert store.owner_of(token) == "alice"
    store.close()


def test_pooled_connections_survive_a_restart_between_calls(redis_server):
    # a restart while no call is running: every pooled connection is dead, none may fail a call
    server = redis_server("--appendonly", "yes")
    store = open_store(server.url, timeout=1)
    token = new_refresh_token()
    store.issue(token, "alice")
    server.stop()
    server.start()
    for _ in range(3):
        assert store.owner_of(token) == "alice"
    assert store.revoke(token).known is True  # its scripts are loaded again into the new process
    store.close()


def test_error_messages_never_show_the_password(redis_server):
    server = redis_server()
    server.stop()
    store = open_store(f"redis://user:hunter2-secret@127.0.0.1:{server.port}/3", timeout=1)
    with pytest.raises(BackendUnavailable) as raised:
        store.ping()
    assert "hunter2" not in str(raised.value)
    assert f"127.0.0.1:{server.port} db 3" in str(raised.value)


def test_a_deny_entry_is_one_key_that_expires_with_the_token(store, session_redis):
    now = time.time()
    store.deny(token_digest("cookie token"), now + 3600)
    with session_redis.client() as client:
        assert client.keys("*") == [f"rt:denied:{token_digest('cookie token')}"]
        assert 3590_000 < client.pttl(f"rt:denied:{token_digest('cookie token')}") <= 3600_000


def start_warnings(caplog) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno == logging.WARNING and "at start" in record.getMessage()
    ]


def test_a_redis_that_answers_nothing_at_start_is_one_warning_and_not_ready(tmp_path, caplog):
    port = free_port()  # a loopback port where nothing listens
    caplog.set_level(logging.INFO)
    app = create_app(
        {"INSTANCE_PATH": str(tmp_path),
         "TOKEN_STORE_URL": f"redis://:hunter2-secret@127.0.0.1:{port}/0"}
    )  # fmt: skip
    (message,) = start_warnings(caplog)
    assert message.startswith(f"token store unavailable at start: Redis store 127.0.0.1:{port}")
    assert "hunter2" not in caplog.text
    response = app.test_client().get("/readyz")
    assert response.status_code == 503
    assert len(start_warnings(caplog)) == 1  # the request's warning is another line


def test_a_redis_that_answers_at_start_is_no_warning(tmp_path, redis_url, caplog):
    caplog.set_level(logging.INFO)
    app = create_app({"INSTANCE_PATH": str(tmp_path), "TOKEN_STORE_URL": redis_url})
    assert start_warnings(caplog) == []
    assert app.test_client().get("/readyz").status_code == 200


def test_timeouts_come_from_the_settings(tmp_path, redis_url):
    app = create_app(
        {
            "INSTANCE_PATH": str(tmp_path),
            "TOKEN_STORE_URL": redis_url,
            "TOKEN_STORE_TIMEOUT": "0.7",
            "TOKEN_STORE_CONNECT_TIMEOUT": "0.3",
        }
    )
    store = app.extensions["token_store"]
    store.ping()
    options = store.client.connection_pool.connection_kwargs
    assert (options["socket_timeout"], options["socket_connect_timeout"]) == (0.7, 0.3)
    assert store.client.connection_pool.connection_kwargs["retry"].get_retries() == 0
    store.close()
    default = open_store(redis_url, timeout=0.7)
    assert default.client.connection_pool.connection_kwargs["socket_connect_timeout"] == 0.7


@pytest.mark.parametrize("url", ["redis://127.0.0.1:notaport/0", "redis://127.0.0.1:6379/x"])
def test_unusable_redis_url_refuses_to_start(tmp_path, url):
    with pytest.raises(ConfigError, match="TOKEN_STORE_URL is not a usable Redis URL"):
        create_app({"INSTANCE_PATH": str(tmp_path), "TOKEN_STORE_URL": url})


def test_unix_socket_url(redis_server, tmp_path):
    socket_path = tmp_path / "redis.sock"
    redis_server("--unixsocket", str(socket_path), "--unixsocketperm", "700")
    store = open_store(f"unix://{socket_path}?db=2", timeout=1)
    token = new_refresh_token()
    store.issue(token, "alice")
    assert store.owner_of(token) == "alice"
    store.close()


def test_rediss_url_speaks_tls(redis_server, tmp_path):
    require_tool(bool(which("openssl")), "openssl", "apt-get install openssl")
    ca, cert, key = tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
    ca_key = tmp_path / "ca-key.pem"

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=30)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test ca",
            "-keyout", str(ca_key), "-out", str(ca))  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
            "-keyout", str(key), "-out", str(tmp_path / "cert.csr"))  # fmt: skip
    (tmp_path / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", str(tmp_path / "cert.csr"), "-CA", str(ca), "-CAkey",
            str(ca_key), "-CAcreateserial", "-days", "1", "-extfile", str(tmp_path / "san.cnf"),
            "-out", str(cert))  # fmt: skip
    server = redis_server(tls=(ca, cert, key))
    store = open_store(server.url, timeout=2)
    token = new_refresh_token()
    store.issue(token, "alice")
    assert store.owner_of(token) == "alice"
    store.close()
    untrusting = open_store(f"rediss://127.0.0.1:{server.port}/0", timeout=2)
    with pytest.raises(BackendUnavailable, match="certificate verify failed"):
        untrusting.ping()
    with pytest.raises(BackendUnavailable):  # plain text to a TLS port
        open_store(f"redis://127.0.0.1:{server.port}/0", timeout=1).ping()


def test_the_store_uses_no_other_redis_database(redis_server):
    server = redis_server()
    store = open_store(server.url.replace("/0", "/5"), timeout=1)
    store.issue(new_refresh_token(), "alice")
    with (
        redis.Redis("127.0.0.1", server.port, 0) as db0,
        redis.Redis("127.0.0.1", server.port, 5) as db5,
    ):
        assert db0.dbsize() == 0
        assert db5.dbsize() == 3
    store.close()


def test_tokens_from_before_sessions_become_sessions_one_per_family(
    store, redis_url, session_redis
):
    first, other = new_refresh_token(), new_refresh_token()
    store.issue(first, "alice")
    store.issue(other, "alice")
    store.rotate(first, successor := successor_of(first), "alice")
    with session_redis.client() as client:  # as the layout before sessions left them
        for key in client.scan_iter("rt:token:*"):
            client.hdel(key, "session", "logged_in_at", "last_used_at", "address", "user_agent")
            client.hincrby(key, "issued_at", -86400)
        client.delete("rt:schema")
    store.close()
    upgraded = int(time.time()) // 60 * 60
    again = open_store(redis_url, timeout=2)
    again.ping()  # the start-up check migrates
    sessions = again.sessions_of("alice").sessions
    # logged in a day ago; last used, as far as anyone knows, at the upgrade
    assert all(s.logged_in_at < upgraded - 3600 <= upgraded <= s.last_used_at for s in sessions)
    assert len({session.id for session in sessions}) == 2
    assert all(session.address == session.user_agent == "" for session in sessions)
    with session_redis.client() as client:
        assert client.get("rt:schema") == "2"
        ids = {client.hget(key, "session") for key in client.scan_iter("rt:token:*")}
    assert len(ids) == 2  # the retired token and its successor: one session
    assert again.log_out_everywhere("alice", 2**40) == 2
    assert again.owner_of(successor) is None
    again.close()
