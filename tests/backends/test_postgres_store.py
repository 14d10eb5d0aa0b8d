"""What only the PostgreSQL store has: its schema and its upgrade, its pool, its round trips,
its durability setting, and its failures (a server stopped, frozen, read-only, a
connection killed), each against a real server."""

from __future__ import annotations

import logging
import multiprocessing
import socket
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from app import create_app
from app.auth.tokens import new_refresh_token
from app.backends.interface import (
    RETIRED_GENERATIONS_KEPT,
    BackendUnavailable,
    Outcome,
    RefreshTokenPolicy,
    Revocation,
    lineage_digest,
    successor_of,
    token_digest,
)
from app.backends.postgres.process import handing_over
from app.backends.postgres.schema import SCHEMA_VERSION, read_sql
from app.backends.postgres.store import SESSIONS_PAGE
from app.config.parsers import ConfigError
from tests.helpers.postgres_server import PASSWORD, QUOTED_PASSWORD, SCRAM_ROLE
from tests.helpers.servers import free_port, wait_until
from tests.helpers.stores import OPERATIONS, open_store
from tests.helpers.tools import require_tool

pytestmark = pytest.mark.postgres

#: The first schema, as it made databases: kept here so the upgrade from it stays tested.
SCHEMA_1 = """
CREATE TABLE refresh_tokens (
    digest    text COLLATE "C" PRIMARY KEY,
    username  text COLLATE "C" NOT NULL,
    issued_at bigint NOT NULL
);
CREATE TABLE token_store_schema (version integer NOT NULL);
INSERT INTO token_store_schema (version) VALUES (1);
"""


def new_database(server, name: str) -> str:
    """Return the URL of a new, empty database on ``server`` (the session's, by default)."""
    return server.create_database(name)


@pytest.fixture
def database(session_postgres, request) -> str:
    """Return the URL of a database of this test's own (for schema tests)."""
    name = "t_" + format(abs(hash(request.node.nodeid)), "x")[:12]
    with session_postgres.admin() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
    return new_database(session_postgres, name)


@pytest.fixture
def store(postgres_url):
    return open_store(postgres_url, timeout=2)


# --- the schema: made once, recorded, upgraded ------------------------------------------


def test_a_new_database_gets_the_tables_and_records_the_version(database):
    store = open_store(database, timeout=2)
    store.ping()
    with psycopg.connect(database) as connection:
        assert connection.execute("SELECT version FROM token_store_schema").fetchall() == [
            (SCHEMA_VERSION,)
        ]
        persistence = dict(
            connection.execute(
                "SELECT relname, relpersistence FROM pg_class WHERE relname IN"
                " ('refresh_tokens', 'denied_tokens', 'rate_limits')"
            ).fetchall()
        )
    # the counters are not precious: no WAL for them
    assert persistence == {"refresh_tokens": "p", "denied_tokens": "p", "rate_limits": "u"}
    store.close()


def _start_and_issue(url: str, results) -> None:
    store = open_store(url, timeout=10)
    token = new_refresh_token()
    store.issue(token, "alice")
    results.put(token)


def test_workers_starting_at_once_make_the_schema_once(database):
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    workers = [context.Process(target=_start_and_issue, args=(database, results)) for _ in range(4)]
    for worker in workers:
        worker.start()
    tokens = [results.get(timeout=30) for _ in workers]
    for worker in workers:
        worker.join(30)
        assert worker.exitcode == 0
    store = open_store(database, timeout=2)
    assert all(store.owner_of(token) == "alice" for token in tokens)
    with psycopg.connect(database) as connection:
        assert connection.execute("SELECT version FROM token_store_schema").fetchall() == [
            (SCHEMA_VERSION,)
        ]
    store.close()


def test_a_database_of_the_first_schema_is_upgraded_and_keeps_every_token(database):
    tokens = {f"user{n}": new_refresh_token() for n in range(5)}
    with psycopg.connect(database, autocommit=True) as connection:
        connection.execute(SCHEMA_1)
        for username, token in tokens.items():
            connection.execute(
                "INSERT INTO refresh_tokens VALUES (%s, %s, %s)",
                (token_digest(token), username, int(time.time())),
            )
    store = open_store(database, timeout=2, policy=RefreshTokenPolicy(lifetime=3600, per_user=2))
    assert {username: store.owner_of(token) for username, token in tokens.items()} == {
        username: username for username in tokens
    }
    assert store.count() == 5
    successor = new_refresh_token()  # an old token rotates, and gains the lifetime
    assert store.rotate(tokens["user0"], successor, "user0").outcome is Outcome.ROTATED
    store.deny(token_digest("cookie"), time.time() + 60)
    assert store.is_denied(token_digest("cookie"))
    with psycopg.connect(database) as connection:
        assert connection.execute("SELECT version FROM token_store_schema").fetchall() == [
            (SCHEMA_VERSION,)
        ]
        (expires_at,) = connection.execute(
            "SELECT expires_at FROM refresh_tokens WHERE digest = %s", (token_digest(successor),)
        ).fetchone()
    assert expires_at is not None
    store.close()


def test_a_database_of_a_newer_version_is_left_as_it_is(database):
    store = open_store(database, timeout=2)
    store.ping()
    store.close()
    with psycopg.connect(database, autocommit=True) as connection:
        connection.execute("UPDATE token_store_schema SET version = %s", (SCHEMA_VERSION + 1,))
    other = open_store(database, timeout=3)  # another pool: it checks the schema again
    token = new_refresh_token()
    other.issue(token, "alice")
    assert other.owner_of(token) == "alice"
    with psycopg.connect(database) as connection:
        assert connection.execute("SELECT version FROM token_store_schema").fetchone() == (
            SCHEMA_VERSION + 1,
        )
    other.close()


def test_a_database_of_version_2_is_upgraded_and_its_families_keep_working(database):
    # a family an earlier version rotated: its live token's successors carry a lineage
    first, live, other = new_refresh_token(), new_refresh_token(), new_refresh_token()
    now = int(time.time())
    with psycopg.connect(database, autocommit=True) as connection:
        connection.execute(read_sql("schema_1.sql").encode())
        connection.execute(read_sql("schema_2.sql").encode())
        connection.execute("INSERT INTO token_store_schema (version) VALUES (2)")
        connection.cursor().executemany(
            "INSERT INTO refresh_tokens (digest, username, issued_at, family, generation,"
            " retired_at, parent) VALUES (%s, 'alice', %s, %s, %s, %s, %s)",
            [
                (token_digest(first), now, token_digest(first), 0, now, None),
                (token_digest(live), now, token_digest(first), 1, None, token_digest(first)),
                (token_digest(other), now, None, None, None, None),
            ],
        )
    store = open_store(database, timeout=2)
    assert store.owner_of(live) == "alice"
    chain = [live]
    for _ in range(RETIRED_GENERATIONS_KEPT + 1):
        successor = successor_of(chain[-1])
        assert store.rotate(chain[-1], successor, "alice").outcome is Outcome.ROTATED
        chain.append(successor)
    rotation = store.rotate(live, successor_of(live), "alice")  # forgotten, known by lineage
    assert (rotation.outcome, rotation.family) == (Outcome.REUSED, token_digest(first)[:12])
    assert store.owner_of(chain[-1]) is None
    assert store.owner_of(other) == "alice"
    with psycopg.connect(database) as connection:
        assert connection.execute("SELECT version FROM token_store_schema").fetchone() == (
            SCHEMA_VERSION,
        )
    store.close()


def test_a_token_written_without_a_login_time_is_logged_out_everywhere_too(store):
    # a host still on schema 3 during a rolling upgrade writes no session columns
    token = new_refresh_token()
    store.issue(token, "alice")
    with psycopg.connect(store.url, autocommit=True) as connection:
        connection.execute("UPDATE refresh_tokens SET logged_in_at = NULL")
    assert store.log_out_everywhere("alice", int(time.time()) + 1) == 1
    assert store.owner_of(token) is None


def test_a_host_of_version_2_calls_its_functions_and_a_retired_revoke_ends_the_family(store):
    # during an upgrade, hosts still running the earlier version call its signatures
    first = new_refresh_token()
    store.issue(first, "alice")
    with psycopg.connect(store.url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT outcome, family_digest FROM token_store_rotate"
            "(%s, %s, 'alice', %s, NULL, 0, 20, 16, false)",
            (token_digest(first), token_digest(second := successor_of(first)), time.time()),
        ).fetchone()
        assert row == ("rotated", token_digest(first))
        lineage = connection.execute(
            "SELECT lineage FROM refresh_tokens WHERE digest = %s", (token_digest(second),)
        ).fetchone()
        assert lineage == (None,)  # it knows of no lineage; the next rotation here sets one
        known = connection.execute("SELECT token_store_revoke(%s)", (token_digest(first),))
        assert known.fetchone() == (True,)
    assert store.owner_of(second) is None
    assert store.count() == 0


def test_a_host_of_version_4_is_told_unknown_for_an_idle_session(store):
    # version 4 knew no outcome "idle": its signature answers what it did answer
    token = new_refresh_token()
    store.issue(token, "alice")
    used = store.sessions_of("alice").sessions[0].last_used_at
    with psycopg.connect(store.url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT outcome, family_digest FROM token_store_rotate"
            "(%s, %s, 'alice', %s, NULL, 0, 20, 16, false, NULL, %s)",
            (token_digest(token), token_digest(successor_of(token)), time.time(), used),
        ).fetchone()
    assert row == ("unknown", "")
    assert store.count() == 0  # the idle session ended all the same
    other = new_refresh_token()
    store.issue(other, "alice")
    (session,) = store.sessions_of("alice").sessions
    with psycopg.connect(store.url, autocommit=True) as connection:
        ended = connection.execute(
            "SELECT token_store_end_session('alice', %s, %s)", (session.id, time.time())
        ).fetchone()
    assert ended == (True,)  # version 4's signature of the session's end
    assert store.count() == 0
    with psycopg.connect(store.url, autocommit=True) as connection:
        cutoff = connection.execute(
            "SELECT token_store_issue(%s, 'alice', %s, NULL, 1, 16, 's1', '', '')",
            (token_digest(new_refresh_token()), time.time()),
        ).fetchone()
    assert cutoff == (None,)  # version 4's login: the cut-off alone
    assert store.count() == 1


def test_every_function_runs_with_the_stores_schema_as_search_path(database):
    open_store(database, timeout=2).ping()
    with psycopg.connect(database) as connection:
        settings = connection.execute(
            "SELECT p.oid::regprocedure::text, p.proconfig FROM pg_proc p"
            " JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'public' ORDER BY 1"
        ).fetchall()
    assert len(settings) >= 8
    assert {name.partition("(")[0] for name, _ in settings} >= {
        "token_store_issue", "token_store_lock_user", "token_store_purge", "token_store_revoke",
        "token_store_revoke_all", "token_store_revoke_prefix", "token_store_rotate",
        "token_store_forget_live",
    }  # fmt: skip
    for name, config in settings:
        assert config == ["search_path=public, pg_temp"], name


def test_a_callers_search_path_cannot_put_another_table_in_the_stores_place(store):
    # a table of the caller's session (pg_temp, searched first unless named) named as the
    # store's: the functions read and change the store's own, whatever the caller's path
    first = new_refresh_token()
    store.issue(first, "alice")
    second = successor_of(first)
    assert store.rotate(first, second, "alice").outcome is Outcome.ROTATED
    with psycopg.connect(store.url, autocommit=True) as connection:
        connection.execute("CREATE TEMPORARY TABLE refresh_tokens (LIKE public.refresh_tokens)")
        connection.execute("SET search_path = pg_temp, public")
        row = connection.execute(
            "SELECT * FROM token_store_revoke(%s, %s, %s)",
            (token_digest(first), lineage_digest(first), time.time()),
        ).fetchone()
    assert Revocation(*row[:3], row[3]) == Revocation(True, True, token_digest(first), "alice")
    assert store.owner_of(second) is None


def indexes(url: str) -> set[str]:
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'refresh_tokens'"
        ).fetchall()
    return {name for (name,) in rows}


def test_no_index_serves_an_operator_command_only(database):
    open_store(database, timeout=2).ping()
    assert indexes(database) == {
        "refresh_tokens_pkey",  # every look-up by digest, and a prefix's range
        "refresh_tokens_by_expiry",  # the bounded purge of each issue and rotation
        "refresh_tokens_by_family",  # rotation, reuse and revoke of a family
        "refresh_tokens_by_lineage",  # a token its family forgot, at rotation and revoke
        "refresh_tokens_by_session",  # a user's live sessions: the sessions API, logouts
    }
    # the per-user limit reads a user's tokens on every login: its index comes with it
    open_store(database, timeout=3, policy=RefreshTokenPolicy(per_user=3)).ping()
    assert "refresh_tokens_by_username" in indexes(database)


# --- one pool per process, one round trip per operation ----------------------------------


def test_every_app_of_a_process_shares_one_pool(postgres_url, tmp_path):
    apps = [
        create_app({"INSTANCE_PATH": str(tmp_path / f"i{n}"), "TOKEN_STORE_URL": postgres_url})
        for n in range(2)
    ]
    one, other = (app.extensions["token_store"] for app in apps)
    assert one.client is other.client
    limiter = apps[0].extensions["rate_limiter"]
    assert limiter.storage.client is one.client  # the rate limits' counters too


def test_every_call_gives_its_connection_back_to_the_pool(postgres_url):
    store = open_store(postgres_url, timeout=5, pool_size=(1, 3))
    token = new_refresh_token()
    store.issue(token, "alice")
    barrier = threading.Barrier(4)

    def calls(_: int) -> list[str | None]:
        barrier.wait(10)
        return [store.owner_of(token) for _ in range(5)]

    with ThreadPoolExecutor(4) as threads:  # more threads than connections: some wait
        assert list(threads.map(calls, range(4))) == [["alice"] * 5] * 4
    pool = store.client._current.pool

    def all_back() -> bool:
        stats = pool.get_stats()
        return stats["pool_available"] == stats["pool_size"]

    # a connection the pool was still opening when the calls ended counts in its size
    # until it is ready; one a call kept would never come back
    wait_until(all_back, 5, "every connection back in the pool")
    store.close()


def _child_pool(store, results) -> None:
    store.issue(new_refresh_token(), "child")
    results.put(id(store.client._current))


def test_a_forked_worker_makes_its_own_pool_and_leaves_the_parents(store):
    token = new_refresh_token()
    store.issue(token, "parent")
    parents = store.client._current
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_child_pool, args=(store, results))
    child.start()
    results.get(timeout=20)
    child.join(20)
    assert child.exitcode == 0
    assert store.client._current is parents  # not closed by the child
    assert store.owner_of(token) == "parent"


ROUND_TRIPS = {
    **OPERATIONS,
    "owner_of (known)": lambda store: store.owner_of(TOKEN),
    "rotate (known)": lambda store: store.rotate(TOKEN, new_refresh_token(), "alice"),
}
TOKEN = new_refresh_token()


@pytest.mark.parametrize("policy", [{}, {"lifetime": 3600, "per_user": 3, "reuse_grace": 5}])
def test_every_operation_is_one_round_trip(postgres_url, monkeypatch, policy):
    store = open_store(postgres_url, timeout=2, policy=RefreshTokenPolicy(**policy))
    store.ping()  # the pool and its first connection, the schema checked
    statements: list[object] = []
    original = psycopg.Connection.execute

    def counted(self, query, *args, **kwargs):
        statements.append(query)
        return original(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", counted)
    store.issue(TOKEN, "alice")
    for name, operation in ROUND_TRIPS.items():
        statements.clear()
        operation(store)
        assert len(statements) == 1, (name, statements)


# --- durability ---------------------------------------------------------------------------

#: A trigger that records the synchronous_commit each write to the tokens ran under.
COMMIT_LEVELS = """
CREATE TABLE commit_levels (operation text, level text);
CREATE FUNCTION record_commit_level() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO commit_levels VALUES (TG_OP, current_setting('synchronous_commit'));
    RETURN NULL;
END $$;
CREATE TRIGGER record_commit_level AFTER INSERT OR UPDATE OR DELETE ON refresh_tokens
    FOR EACH ROW EXECUTE FUNCTION record_commit_level();
"""


@pytest.mark.parametrize("durability", ["normal", "relaxed"])
@pytest.mark.parametrize("policy", [{}, {"per_user": 5}])
def test_only_relaxed_logins_commit_without_waiting_for_the_wal(database, durability, policy):
    rotating = RefreshTokenPolicy(reuse_grace=0, **policy)
    store = open_store(database, timeout=2, policy=rotating, durability=durability)
    store.ping()
    with psycopg.connect(database, autocommit=True) as connection:
        connection.execute(COMMIT_LEVELS)
    token, successor = new_refresh_token(), new_refresh_token()
    store.issue(token, "alice")
    store.rotate(token, successor, "alice")
    store.revoke(successor)
    with psycopg.connect(database) as connection:
        levels = connection.execute("SELECT operation, level FROM commit_levels").fetchall()
        assert connection.execute("SHOW synchronous_commit").fetchone() == ("on",)
    login = "off" if durability == "relaxed" else "on"
    assert levels[0] == ("INSERT", login)
    assert set(levels[1:]) == {("UPDATE", "on"), ("INSERT", "on"), ("DELETE", "on")}
    # the pooled connection is back to the server's level after the relaxed login
    with store.client.connection() as connection:
        assert connection.execute("SHOW synchronous_commit").fetchone() == ("on",)
    # and a login reads the user's cut-off in its one statement, whatever its durability
    store.log_out_everywhere("alice", 1_000)
    assert store.issue(new_refresh_token(), "alice").cutoff == 1_000
    store.close()


def test_relaxed_durability_is_for_postgresql_only(tmp_path):
    with pytest.raises(ConfigError, match="TOKEN_STORE_DURABILITY=relaxed is for a PostgreSQL"):
        create_app({"INSTANCE_PATH": str(tmp_path), "TOKEN_STORE_DURABILITY": "relaxed"})


def test_pool_sizes_are_settings(tmp_path, postgres_url):
    app = create_app(
        {
            "INSTANCE_PATH": str(tmp_path),
            "TOKEN_STORE_URL": postgres_url,
            "TOKEN_STORE_POOL_MIN": "2",
            "TOKEN_STORE_POOL_MAX": "7",
            "TOKEN_STORE_TIMEOUT": "0.7",
        }
    )
    client = app.extensions["token_store"].client
    assert (client.min_size, client.max_size, client.timeout) == (2, 7, 0.7)
    assert "statement_timeout=700" in client.conninfo
    with pytest.raises(ConfigError, match="TOKEN_STORE_POOL_MIN must not be more"):
        create_app(
            {"INSTANCE_PATH": str(tmp_path), "TOKEN_STORE_URL": postgres_url,
             "TOKEN_STORE_POOL_MIN": "5", "TOKEN_STORE_POOL_MAX": "4"}
        )  # fmt: skip


# --- passwords --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://tokens:{QUOTED_PASSWORD}@127.0.0.1:notaport/tokens",
        f"postgresql://tokens:{QUOTED_PASSWORD}@127.0.0.1:5432/tokens?nosuchoption=1",
        f"postgres://tokens:{PASSWORD}@127.0.0.1/tokens",
        f"postgresql://tokens:{QUOTED_PASSWORD}%zz@127.0.0.1/tokens",
    ],
)
def test_an_unusable_url_refuses_to_start_without_showing_it(tmp_path, url):
    with pytest.raises(ConfigError, match="not a usable PostgreSQL URL") as raised:
        create_app({"INSTANCE_PATH": str(tmp_path), "TOKEN_STORE_URL": url})
    assert "s3cret" not in str(raised.value)


def test_a_refused_password_is_503_and_no_line_shows_it(
    session_postgres, postgres_url, tmp_path, caplog
):
    # the schema is the service role's before the other role is let in: tables that role
    # made would be its own, which the later tests of this process could not read
    open_store(postgres_url, timeout=5).ping()
    caplog.set_level(logging.DEBUG)
    wrong = QUOTED_PASSWORD.replace("s3cret", "wrong-s3cret")
    url = f"postgresql://{SCRAM_ROLE}:{wrong}@127.0.0.1:{session_postgres.port}/tokens"
    app = create_app({"INSTANCE_PATH": str(tmp_path), "TOKEN_STORE_URL": url})
    response = app.test_client().post("/login", json={"username": "alice"})
    assert response.status_code == 503
    assert "password authentication failed" in caplog.text
    assert "s3cret" not in caplog.text
    # the right password is let in
    right = url.replace(wrong, QUOTED_PASSWORD)
    good = create_app({"INSTANCE_PATH": str(tmp_path), "TOKEN_STORE_URL": right})
    assert good.test_client().post("/login", json={"username": "alice"}).status_code == 200


def test_an_unreachable_server_at_start_is_one_warning_without_the_password(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    port = free_port()
    url = f"postgresql://tokens:{QUOTED_PASSWORD}@127.0.0.1:{port}/tokens"
    app = create_app({"INSTANCE_PATH": str(tmp_path), "TOKEN_STORE_URL": url})
    warnings = [r.getMessage() for r in caplog.records if "at start" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].startswith(
        f"token store unavailable at start: PostgreSQL store 127.0.0.1:{port}/tokens:"
    )
    client = app.test_client()
    assert client.get("/readyz").status_code == 503
    response = client.post("/login", json={"username": "alice"})
    assert response.status_code == 503
    assert response.json == {"message": "token store is unavailable, try again shortly"}
    assert "s3cret" not in caplog.text
    assert PASSWORD not in caplog.text


# --- a server stopped, restarted, frozen, read-only; connections killed --------------------


@pytest.fixture(scope="module")
def steady_server():
    """A dedicated server (PostgreSQL's defaults) for the tests that leave it running as
    they found it: frozen then thawed, read-only then not, connections killed."""
    from tests.helpers.postgres_server import INSTALL_HINT, PostgresServer, postgres_available

    require_tool(postgres_available(), "PostgreSQL's server programs", INSTALL_HINT)
    server = PostgresServer()
    server.start().create_database("tokens")
    yield server
    server.remove()


@pytest.mark.parametrize("pool_min", ["0", "1"])
def test_a_stopped_server_is_503_at_once_and_a_restarted_one_is_used_again(
    postgres_server, tmp_path, caplog, pool_min
):
    # TOKEN_STORE_POOL_MIN=0 or 1: after the stop, whether an idle connection is left
    # depends on how the start-up raced; with none the pool connects while the request waits
    server = postgres_server()
    app = create_app({"INSTANCE_PATH": str(tmp_path), "TOKEN_STORE_URL": server.url(),
                      "TOKEN_STORE_TIMEOUT": "30", "TOKEN_STORE_POOL_MIN": pool_min})  # fmt: skip
    client = app.test_client()
    tokens = client.post("/login", json={"username": "alice"}).json
    body = {"username": "alice", "refreshToken": tokens["refreshToken"]}
    server.stop()
    caplog.set_level(logging.WARNING)
    started = time.monotonic()
    for _ in range(3):
        response = client.post("/token", json=body)
        assert response.status_code == 503
        assert response.headers["Retry-After"] == "1"
        assert client.post("/login", json={"username": "bob"}).status_code == 503
    assert client.get("/readyz").status_code == 503
    assert time.monotonic() - started < 30  # a refused connection: no wait for the timeout
    assert "PoolTimeout" not in caplog.text
    server.start()
    # every pooled connection died with the server: none is handed to a request
    for _ in range(5):
        assert client.post("/token", json=body).status_code == 200
    assert client.get("/readyz").status_code == 200


def test_the_pool_reports_a_refused_connection_and_not_a_silent_one():
    # what lets a waiting call fail at once: a refusal is reported as it happens, while
    # a server that accepts and never answers (a frozen one) is left to the deadlines
    refusals: list[None] = []
    connection_class = handing_over([], lambda: refusals.append(None))
    with pytest.raises(psycopg.OperationalError, match="refused"):
        connection_class.connect(f"host=127.0.0.1 port={free_port()} connect_timeout=2")
    assert len(refusals) == 1
    with socket.create_server(("127.0.0.1", 0)) as silent:  # never accepts, never answers
        port = silent.getsockname()[1]
        with pytest.raises(psycopg.errors.ConnectionTimeout):
            connection_class.connect(f"host=127.0.0.1 port={port} connect_timeout=2")
    assert len(refusals) == 1


def test_a_refused_connection_leaves_the_calls_running_alone(postgres_url):
    # a server may refuse one more connection and keep serving the open ones (at its
    # max_connections): the pool it closes lets a call that is running finish
    store = open_store(postgres_url, timeout=10, pool_size=(1, 4))
    store.ping()
    running = threading.Event()

    def slow_call() -> object:
        with store.client.connection() as connection:
            running.set()
            return connection.execute("SELECT 7 FROM pg_sleep(1)").fetchone()

    with ThreadPoolExecutor(1) as thread:
        answer = thread.submit(slow_call)
        assert running.wait(10)
        pool = store.client._current.pool
        with pytest.raises(psycopg.OperationalError):  # as the pool's own thread would
            pool.connection_class.connect(f"host=127.0.0.1 port={free_port()}")
        wait_until(lambda: pool.closed, 10, "the pool closed after the refusal")
        assert answer.result(20) == (7,)
    assert store.client._current is None  # the next call connects anew
    token = new_refresh_token()
    store.issue(token, "alice")
    assert store.owner_of(token) == "alice"
    store.close()


def test_a_restart_between_calls_fails_no_call(postgres_server):
    server = postgres_server()
    store = open_store(server.url(), timeout=5, pool_size=(3, 3))
    tokens = [new_refresh_token() for _ in range(6)]
    with ThreadPoolExecutor(3) as pool:  # three connections in the pool
        list(pool.map(lambda token: store.issue(token, "alice"), tokens))
    server.stop()
    server.start()
    with ThreadPoolExecutor(3) as pool:
        assert list(pool.map(store.owner_of, tokens)) == ["alice"] * 6
    store.close()


def test_killed_idle_connections_are_replaced_not_handed_out(steady_server):
    server = steady_server
    store = open_store(server.url(), timeout=5, pool_size=(2, 2))
    token = new_refresh_token()
    store.issue(token, "alice")
    with server.admin() as admin:
        killed = [
            pid
            for pid, _ in admin.execute(  # terminated in the list: only the service's
                "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'token-service'"
            )
        ]
    assert killed

    def gone() -> bool:  # each killed backend has said so and closed its socket
        with server.admin() as admin:
            return not admin.execute(
                "SELECT FROM pg_stat_activity WHERE pid = ANY(%s)", (killed,)
            ).fetchall()

    wait_until(gone, 10, "the killed connections' end")
    for _ in range(4):
        assert store.owner_of(token) == "alice"
    store.close()


def test_a_frozen_server_fails_each_call_within_its_timeout(steady_server):
    server = steady_server
    timeout = 0.5
    store = open_store(server.url(), timeout=timeout)
    token = new_refresh_token()
    store.issue(token, "alice")  # a pooled connection, which the freeze leaves open
    server.freeze()
    try:
        for name in ("owner_of", "rotate", "issue"):
            started = time.monotonic()
            # the call that waited on the frozen server, or the next one, waiting for a
            # connection that the frozen server does not complete
            with pytest.raises(BackendUnavailable, match=r"NoAnswerError|PoolTimeout"):
                OPERATIONS[name](store)
            assert time.monotonic() - started < 4 * timeout  # one wait, not a hang
    finally:
        server.thaw()
    assert store.owner_of(token) == "alice"
    store.close()


def test_a_read_only_server_refuses_writes_with_a_503_that_says_so(steady_server, tmp_path, caplog):
    server = steady_server
    app = create_app({"INSTANCE_PATH": str(tmp_path), "TOKEN_STORE_URL": server.url()})
    client = app.test_client()
    tokens = client.post("/login", json={"username": "alice"}).json
    body = {"username": "alice", "refreshToken": tokens["refreshToken"]}
    read_only(server, "on")  # as a standby after a failover answers
    try:
        caplog.set_level(logging.WARNING)
        response = client.post("/login", json={"username": "bob"})
        assert response.status_code == 503
        assert response.json == {"message": "token store is unavailable, try again shortly"}
        assert "the server refused the write as read-only" in caplog.text
        assert "ReadOnlySqlTransaction" in caplog.text
        assert client.delete(f"/token/{tokens['refreshToken']}").status_code == 503
        assert client.post("/token", json=body).status_code == 200  # reads still answer
    finally:
        read_only(server, "off")
    assert client.post("/login", json={"username": "bob"}).status_code == 200


def read_only(server, setting: str) -> None:
    """Set default_transaction_read_only on the whole server; wait until it is in force."""
    with server.admin() as admin:
        admin.execute(f"ALTER SYSTEM SET default_transaction_read_only = {setting}")
        admin.execute("SELECT pg_reload_conf()")  # the postmaster reloads, then tells each backend

    def in_force() -> bool:  # a new backend has the postmaster's settings
        with server.admin() as admin:
            return admin.execute("SHOW default_transaction_read_only").fetchone() == (setting,)

    wait_until(in_force, 10, f"default_transaction_read_only = {setting}")


#: A pause after a rotation has retired its token and before its successor is in: a
#: connection killed then leaves half a rotation, if anything can.
SLOW_SUCCESSORS = """
CREATE FUNCTION slow_successor() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.parent IS NOT NULL THEN
        PERFORM pg_sleep(0.005);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER slow_successor BEFORE INSERT ON refresh_tokens
    FOR EACH ROW EXECUTE FUNCTION slow_successor();
"""
ROTATING_THREADS = 4
ROTATIONS_PER_THREAD = 40


def drop_slow_successors(server) -> None:
    with server.admin("tokens") as admin:
        admin.execute("DROP TRIGGER slow_successor ON refresh_tokens")
        admin.execute("DROP FUNCTION slow_successor")


def test_connections_killed_during_rotations_never_leave_half_a_rotation(steady_server, request):
    # each thread rotates its own family; a killer terminates the store's connections
    # meanwhile: every rotation either happened whole (its answer may be lost) or not
    server = steady_server
    store = open_store(server.url(), timeout=5, policy=RefreshTokenPolicy(reuse_grace=0))
    store.ping()
    with server.admin("tokens") as admin:  # each rotation waits between its two writes
        admin.execute(SLOW_SUCCESSORS)
    request.addfinalizer(lambda: drop_slow_successors(server))
    stop = threading.Event()

    def kill_connections() -> int:
        kills = 0
        with server.admin() as admin:
            while not stop.is_set() and kills < 500:
                (count,) = admin.execute(  # one at a time: some rotations get through
                    "SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM"
                    " pg_stat_activity WHERE application_name = 'token-service'"
                    " AND state = 'active' LIMIT 1) AS running"
                ).fetchone()
                kills += count
                time.sleep(0.01)
        return kills

    def settled(call, *args):
        """Return ``call(*args)`` once it is answered (the killer may kill it too)."""
        for _ in range(50):
            try:
                return call(*args)
            except BackendUnavailable:
                continue
        raise AssertionError("never answered")

    def rotate_family(worker: int) -> Counter:
        token = new_refresh_token()
        while True:
            try:
                store.issue(token, f"user{worker}")
                break
            except BackendUnavailable:
                token = new_refresh_token()
        seen: Counter = Counter()
        for _ in range(ROTATIONS_PER_THREAD):
            successor = new_refresh_token()
            try:
                outcome = store.rotate(token, successor, f"user{worker}").outcome
            except BackendUnavailable:
                # unanswered: it happened whole or not at all, never half
                owners = (settled(store.owner_of, token), settled(store.owner_of, successor))
                assert owners in {(f"user{worker}", None), (None, f"user{worker}")}, owners
                seen["unanswered"] += 1
                if owners[1] is not None:
                    token = successor
                continue
            assert outcome is Outcome.ROTATED
            seen["rotated"] += 1
            token = successor
        assert settled(store.owner_of, token) == f"user{worker}"
        with psycopg.connect(server.url()) as connection:  # one live token in the family
            (live,) = connection.execute(
                "SELECT count(*) FROM refresh_tokens WHERE username = %s AND retired_at IS NULL",
                (f"user{worker}",),
            ).fetchone()
        assert live == 1
        return seen

    with ThreadPoolExecutor(ROTATING_THREADS + 1) as pool:
        killer = pool.submit(kill_connections)
        results = list(pool.map(rotate_family, range(ROTATING_THREADS)))
        stop.set()
        kills = killer.result()
    assert kills > 0
    totals = sum(results, Counter())
    assert totals["rotated"] > 0
    assert totals["unanswered"] > 0  # some rotations were cut: none of them by half
    store.close()


def test_a_database_of_version_3_is_upgraded_and_its_tokens_become_sessions(database):
    store = open_store(database, timeout=2)
    first, other = new_refresh_token(), new_refresh_token()
    store.issue(first, "alice")
    store.issue(other, "alice")
    store.rotate(first, successor := successor_of(first), "alice")
    store.close()
    with psycopg.connect(database, autocommit=True) as connection:
        # as version 3 left it: no session columns, no cut-offs
        connection.execute(
            "DROP INDEX refresh_tokens_by_session; DROP TABLE cutoffs;"
            " ALTER TABLE refresh_tokens DROP COLUMN session, DROP COLUMN logged_in_at,"
            " DROP COLUMN last_used_at, DROP COLUMN address, DROP COLUMN user_agent;"
            " UPDATE token_store_schema SET version = 3;"
            " UPDATE refresh_tokens SET issued_at = issued_at - 86400"
        )
    upgraded = int(time.time()) // 60 * 60
    store = open_store(database, timeout=2)
    sessions = store.sessions_of("alice").sessions
    # logged in a day ago; last used, as far as anyone knows, at the upgrade
    assert all(s.logged_in_at < upgraded - 3600 <= upgraded <= s.last_used_at for s in sessions)
    assert len({session.id for session in sessions}) == 2
    assert all(session.address == session.user_agent == "" for session in sessions)
    assert all(len(session.id) == 64 for session in sessions)  # two random UUIDs' bits
    with psycopg.connect(database) as connection:
        (families,) = connection.execute(
            "SELECT count(DISTINCT session) FROM refresh_tokens WHERE family IS NOT NULL"
        ).fetchone()
    assert families == 1  # the retired token and its successor: one session
    assert store.log_out_everywhere("alice", int(time.time())) == 2
    assert store.owner_of(successor) is None
    store.close()


def test_a_users_sessions_are_read_through_the_index_by_username(store):
    store.issue(new_refresh_token(), "alice")
    with psycopg.connect(store.url, autocommit=True) as connection:
        connection.execute("SET enable_seqscan = off")  # a table this small: force the choice
        plan = connection.execute(
            f"EXPLAIN {SESSIONS_PAGE}",
            {"username": "alice", "at": 1, "session": "", "now": 0, "idle": None, "limit": 51},
        ).fetchall()
    text = "\n".join(row[0] for row in plan)
    assert "refresh_tokens_by_session" in text
    assert "Sort" not in text  # the index's order is the page's
