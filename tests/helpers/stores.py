"""The refresh-token stores the tests run on, and the real servers of the remote ones
(Redis, PostgreSQL)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.auth.tokens import new_refresh_token
from app.backends import backend_at
from app.backends.interface import RefreshTokenStore
from app.backends.postgres.store import PostgresTokenStore
from app.backends.redis.store import RedisTokenStore
from app.backends.sqlite.store import SQLiteTokenStore
from tests.helpers.apps import DEFAULT_ALGORITHM
from tests.helpers.tools import require_tool

#: The refresh-token stores every app and server of the tests runs on, one test each.
STORE_BACKENDS = ("sqlite", "redis", "postgresql")
#: The folder of the suites that run on every backend: the store and counters contracts.
#: Every other test that builds an app runs on SQLite, the default, unless it names its
#: stores with ``@pytest.mark.store(...)``; tests/api/test_stores.py is the API's smoke run
#: on each of the others.
EVERY_BACKEND_FOLDER = Path(__file__).resolve().parents[1] / "backends"
#: The marker of each backend's tests that start a real server (``make test-fast`` skips them).
SERVER_MARKS = {"redis": pytest.mark.redis, "postgresql": pytest.mark.postgres}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "store(*backends): run the test on these refresh-token stores only "
        f"(default: every one of {', '.join(STORE_BACKENDS)})",
    )
    config.addinivalue_line(
        "markers", "own_store: the test sets TOKEN_STORE_URL itself, so it runs once"
    )
    config.addinivalue_line(
        "markers",
        "signing_algorithms(*algorithms): run the test's app signing with each of these;"
        f" {DEFAULT_ALGORITHM} on every store, the others on the first store only",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run every test that builds an app or a server on its stores: each backend under
    tests/backends/, SQLite elsewhere.

    The Redis case is marked ``redis`` and the PostgreSQL one ``postgres``, so
    ``make test-fast`` leaves them out; a test about given backends says so with
    ``@pytest.mark.store("redis")``, and one that sets its own TOKEN_STORE_URL with
    ``@pytest.mark.own_store``. A module
    marked ``signing_algorithms("HS256", "EdDSA")`` also runs with an EdDSA app, on
    one store: the keys do not depend on the store.
    """
    algorithms_marker = metafunc.definition.get_closest_marker("signing_algorithms")
    extra_algorithms = [
        algorithm
        for algorithm in (algorithms_marker.args if algorithms_marker else ())
        if algorithm != DEFAULT_ALGORITHM
    ]
    if "signing_algorithm" not in metafunc.fixturenames:
        extra_algorithms = []
    if "store_backend" not in metafunc.fixturenames:
        if extra_algorithms:
            metafunc.parametrize(
                "signing_algorithm", [DEFAULT_ALGORITHM, *extra_algorithms], indirect=True
            )
        return
    marker = metafunc.definition.get_closest_marker("store")
    if metafunc.definition.get_closest_marker("own_store"):
        backends: tuple[str, ...] = ("sqlite",)  # overridden by the test: run it once
    elif marker:
        backends = marker.args
    elif EVERY_BACKEND_FOLDER in metafunc.definition.path.parents:
        backends = STORE_BACKENDS
    else:
        backends = ("sqlite",)
    if not extra_algorithms:
        metafunc.parametrize(
            "store_backend",
            [store_param(name) for name in backends],
            indirect=True,
        )
        return
    cases = [store_param(name, DEFAULT_ALGORITHM) for name in backends]
    cases += [store_param(backends[0], algorithm) for algorithm in extra_algorithms]
    metafunc.parametrize(("store_backend", "signing_algorithm"), cases, indirect=True)


def store_param(backend: str, algorithm: str | None = None) -> Any:
    """Return ``backend`` (with ``algorithm``) as a pytest parameter, marked with its
    server's marker (``redis``, ``postgres``) when it has one."""
    marks = SERVER_MARKS.get(backend, ())
    if algorithm is None:
        return pytest.param(backend, marks=marks)
    name = backend if algorithm == DEFAULT_ALGORITHM else f"{backend}-{algorithm}"
    return pytest.param(backend, algorithm, marks=marks, id=name)


@pytest.fixture
def store_backend(request: pytest.FixtureRequest) -> str | None:
    """Return the TOKEN_STORE_URL of the backend under test: None is SQLite's default file."""
    if request.param == "sqlite":
        return None
    if request.param == "postgresql":
        return request.getfixturevalue("postgres_url")
    return request.getfixturevalue("redis_url")


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Return a starter of real redis-servers (options as arguments); all stopped afterwards."""
    from tests.helpers.redis_server import INSTALL_HINT, RedisServer, redis_server_available

    require_tool(redis_server_available(), "redis-server", INSTALL_HINT)
    started: list[RedisServer] = []

    def start(*options: str, tls: tuple[Path, Path, Path] | None = None) -> RedisServer:
        server = RedisServer(tmp_path / f"redis-{len(started)}", options, tls)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def session_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One redis-server for the tests that need only an empty Redis (see ``redis_url``)."""
    from tests.helpers.redis_server import INSTALL_HINT, RedisServer, redis_server_available

    require_tool(redis_server_available(), "redis-server", INSTALL_HINT)
    server = RedisServer(tmp_path_factory.mktemp("session-redis")).start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(session_redis: Any) -> str:
    """Return the URL of an emptied Redis."""
    with session_redis.client() as client:
        client.flushall()
    return session_redis.url


@pytest.fixture(params=[store_param(backend) for backend in STORE_BACKENDS])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Return the URL of an empty store, once per backend (for the store's own tests)."""
    if request.param == "sqlite":
        (tmp_path / "store").mkdir()
        return f"sqlite:///{tmp_path / 'store' / 'refresh_tokens.sqlite3'}"
    if request.param == "postgresql":
        return request.getfixturevalue("postgres_url")
    return request.getfixturevalue("redis_url")


@pytest.fixture(scope="session")
def session_postgres() -> Iterator[Any]:
    """One PostgreSQL (fsync off) per test process, with the service's database ``tokens``."""
    from tests.helpers.postgres_server import FAST, INSTALL_HINT, PostgresServer, postgres_available

    require_tool(postgres_available(), "PostgreSQL's server programs", INSTALL_HINT)
    server = PostgresServer(FAST).start()
    server.create_database("tokens")
    server.cleaner = server.admin("tokens")
    yield server
    server.cleaner.close()
    server.remove()


#: Every row the store keeps, emptied before each test (DELETE: cheaper than a TRUNCATE
#: or a new database on tables this small).
EMPTY_TABLES = (
    "DELETE FROM refresh_tokens; DELETE FROM denied_tokens; DELETE FROM rate_limits;"
    " DELETE FROM cutoffs"
)


@pytest.fixture
def postgres_url(session_postgres: Any) -> str:
    """Return the URL of the session's PostgreSQL database, emptied."""
    import psycopg

    with contextlib.suppress(psycopg.errors.UndefinedTable):  # no tables yet: nothing to empty
        session_postgres.cleaner.execute(EMPTY_TABLES)
    return session_postgres.url("tokens")


@pytest.fixture
def postgres_server() -> Iterator[Callable[..., Any]]:
    """Return a starter of dedicated PostgreSQL servers (``name=value`` settings as
    arguments; PostgreSQL's durable defaults), each with the database ``tokens``; all
    stopped and removed afterwards."""
    from tests.helpers.postgres_server import INSTALL_HINT, PostgresServer, postgres_available

    require_tool(postgres_available(), "PostgreSQL's server programs", INSTALL_HINT)
    started: list[Any] = []

    def start(*settings: str) -> Any:
        server = PostgresServer(settings)
        started.append(server)
        server.start().create_database("tokens")
        return server

    yield start
    for server in started:
        server.remove()


def open_store(url: str, timeout: float, **options: Any) -> RefreshTokenStore:
    """Return the store of the backend at ``url`` (``backend_at``'s keywords)."""
    return backend_at(url, timeout, **options).store


def stored_contents(store: RefreshTokenStore) -> str:
    """Return, as text, everything ``store`` keeps: to show no token is kept in clear."""
    store.close()
    if isinstance(store, SQLiteTokenStore):
        folder = Path(store.path).parent  # the database with its -wal and -shm files
        return "\n".join(path.read_bytes().decode("latin-1") for path in folder.iterdir())
    if isinstance(store, PostgresTokenStore):
        import psycopg

        with psycopg.connect(store.url, autocommit=True) as connection:
            return "\n".join(
                str(row)
                for table in ("refresh_tokens", "denied_tokens", "token_store_schema")
                for row in connection.execute(f"SELECT t::text FROM {table} t")  # noqa: S608
            )
    assert isinstance(store, RedisTokenStore)
    parts = []
    client = store.client
    for key in client.scan_iter():
        kind = client.type(key)
        if kind == "hash":
            value: Any = client.hgetall(key)
        elif kind == "zset":
            value = client.zrange(key, 0, -1, withscores=True)
        else:
            value = client.dump(key)
        parts.append(f"{key} {kind} {value}")
    return "\n".join(parts)


#: One call of each store operation, for the tests of a store that cannot answer.
OPERATIONS = {
    "issue": lambda store: store.issue(new_refresh_token(), "alice"),
    "owner_of": lambda store: store.owner_of(new_refresh_token()),
    "describe": lambda store: store.describe(new_refresh_token()),
    "revoke": lambda store: store.revoke(new_refresh_token()),
    "tokens_of": lambda store: store.tokens_of("alice"),
    "revoke_all": lambda store: store.revoke_all("alice"),
    "revoke_digest": lambda store: store.revoke_digest("abcdef12"),
    "count": lambda store: store.count(),
    "ping": lambda store: store.ping(),
    "rotate": lambda store: store.rotate(new_refresh_token(), new_refresh_token(), "alice"),
    "purge_expired": lambda store: store.purge_expired(),
    "deny": lambda store: store.deny("f" * 64, time.time() + 60),
    "is_denied": lambda store: store.is_denied("f" * 64),
}
