"""Shared fixtures: the app, its test client, crafted tokens and real servers."""

from __future__ import annotations

import base64
import functools
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import jwt
import pytest
import redis
import requests
from flask import Flask
from flask.testing import FlaskClient

from app import create_app
from app.config import KEY_FILE_NAMES, Settings
from app.keys import KeyRing, create_private_file, load_key_ring, new_private_key_pem
from app.store import RefreshTokenStore
from app.store.redis import RedisTokenStore
from app.store.sqlite import SQLiteTokenStore

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() == "true"
#: The refresh-token stores every app and server of the tests runs on, one test each.
STORE_BACKENDS = ("sqlite", "redis")
#: What the app signs with unless a test module asks for more (``signing_algorithms``).
DEFAULT_ALGORITHM = "HS256"


def require_tool(available: bool, what: str, how: str) -> None:
    """Skip a test that needs a missing tool on a laptop, but fail it in CI."""
    if available:
        return
    message = f"{what} is not available; install it with: {how}"
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Keep the developer's own settings out of the tests, and their files out of the tree."""
    for setting in fields(Settings):
        monkeypatch.delenv(setting.metadata["env"], raising=False)
    monkeypatch.setenv("INSTANCE_PATH", str(tmp_path / "default-instance"))


@pytest.fixture
def signing_secret() -> str:
    return secrets.token_urlsafe(48)


@pytest.fixture
def instance_path(tmp_path: Path) -> Path:
    return tmp_path / "instance"


@dataclass
class ServiceKey:
    """The key that the app under test signs with, as the tests know it."""

    algorithm: str
    secret: str
    #: The private key file, for EdDSA and ES256: where the app would generate it.
    key_file: Path | None = None

    @property
    def env(self) -> dict[str, str]:
        """Return the settings that make an app sign with this key (beside SIGNING_SECRET)."""
        return {} if self.algorithm == "HS256" else {"SIGNING_ALGORITHM": self.algorithm}

    @functools.cached_property
    def ring(self) -> KeyRing:
        """Return the service's own key ring for this key (signs as the app does)."""
        key_file = None if self.key_file is None else str(self.key_file)
        return load_key_ring(self.secret, self.algorithm, key_file=key_file)

    @property
    def private(self) -> Any:
        return self.secret if self.key_file is None else self.ring.current.signing_key

    @property
    def public(self) -> Any:
        return self.secret if self.key_file is None else self.ring.current.verifier.key

    @property
    def kid(self) -> str:
        return self.ring.current.kid

    def decode(self, token: str) -> dict[str, Any]:
        """Return the claims of a token this key signed (checked by PyJWT alone)."""
        return jwt.decode(token, self.public, algorithms=[self.algorithm])


@pytest.fixture
def signing_algorithm(request: pytest.FixtureRequest) -> str:
    """Return the algorithm the app signs with: HS256, unless the module asks for others."""
    return getattr(request, "param", DEFAULT_ALGORITHM)


@pytest.fixture
def signing_key(signing_algorithm: str, signing_secret: str, instance_path: Path) -> ServiceKey:
    """Return the key of the apps that ``make_app`` builds.

    An asymmetric key is put where the app generates its own (the instance folder),
    so the app runs on its defaults and the test still knows the key.
    """
    if signing_algorithm == "HS256":
        return ServiceKey("HS256", signing_secret)
    instance_path.mkdir(mode=0o700, exist_ok=True)
    key_file = instance_path / KEY_FILE_NAMES[signing_algorithm]
    create_private_file(str(key_file), new_private_key_pem(signing_algorithm))
    return ServiceKey(signing_algorithm, signing_secret, key_file)


@pytest.fixture
def make_app(
    signing_secret: str, signing_key: ServiceKey, instance_path: Path, store_backend: str | None
) -> Callable[..., Flask]:
    """Return a factory of apps sharing one key, instance folder and store, with overrides."""

    def make(**overrides: Any) -> Flask:
        settings = {
            "SIGNING_SECRET": signing_secret,
            "INSTANCE_PATH": str(instance_path),
            "TOKEN_STORE_URL": store_backend,
            **signing_key.env,
        }
        settings.update(overrides)
        return create_app({key: value for key, value in settings.items() if value is not None})

    return make


@pytest.fixture
def app(make_app: Callable[..., Flask]) -> Iterator[Flask]:
    app = make_app()
    app.config["TESTING"] = True
    yield app
    app.extensions["token_store"].close()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def runner(app: Flask):
    return app.test_cli_runner()


def login(client: FlaskClient, username: str = "alice", **kwargs: Any) -> dict[str, str]:
    """Log ``username`` in with a JSON body and return the two tokens."""
    response = client.post("/login", json={"username": username, "password": "pw"}, **kwargs)
    assert response.status_code == 200, response.data
    return response.get_json()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def make_token(
    key: str | ServiceKey, claims: dict[str, Any], algorithm: str | None = None, **headers
) -> str:
    """Sign arbitrary claims, as an attacker holding (or guessing) a key would.

    ``key`` is a secret (HS256 by default) or the app's own key (its algorithm).
    No ``kid`` unless one is given: the app verifies such a token with its current key.
    """
    if isinstance(key, ServiceKey):
        algorithm = algorithm or key.algorithm
        key = key.private
    return jwt.encode(claims, key, algorithm=algorithm or "HS256", headers=headers or None)


def unsigned_token(claims: dict[str, Any]) -> str:
    """Return an ``alg: none`` token with an empty signature."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}."


def valid_claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    claims = {"username": "alice", "role": "user", "iat": now, "exp": now + 60}
    claims.update(changes)
    return {key: value for key, value in claims.items() if value is not None}


# --- real servers -------------------------------------------------------------------


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise TimeoutError(f"{what} not ready after {timeout} s")


def stop_process(process: subprocess.Popen, timeout: float = 10) -> None:
    """Stop a process by its PID: TERM, then KILL if it lingers."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)


def listening_socket() -> socket.socket:
    """Return a socket listening on a port of 127.0.0.1 that the kernel picked.

    Handed to a server as an inherited descriptor, the port is never free for
    another process to take between choosing it and binding it.
    """
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    listener.set_inheritable(True)
    return listener


@dataclass
class Gunicorn:
    """A real gunicorn serving wsgi:app on a loopback port it inherits, already bound."""

    env: dict[str, str]
    workers: int
    log_path: Path
    listener: socket.socket = field(default_factory=listening_socket)
    process: subprocess.Popen | None = None

    @property
    def port(self) -> int:
        return self.listener.getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20) -> Gunicorn:
        descriptor = self.listener.fileno()
        command = [
            sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py",
            "-b", f"fd://{descriptor}", "-w", str(self.workers), "wsgi:app",
        ]  # fmt: skip
        self.log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            pass_fds=(descriptor,),
        )
        wait_until(self._ready, timeout, f"gunicorn on port {self.port}")
        return self

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"gunicorn exited: {self.log_path.read_text()[-2000:]}")
        try:
            return requests.get(f"{self.url}/healthz", timeout=3).status_code == 200
        except requests.RequestException:  # refused, or too slow on a loaded machine
            return False

    def worker_pids(self) -> list[int]:
        assert self.process is not None
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return [int(pid) for pid in children.read_text().split()]

    def stop(self) -> None:
        """Stop gunicorn and close the port, so that a client is refused, not left waiting."""
        if self.process is not None:
            stop_process(self.process)
            self.process = None
            self.log.close()
        self.listener.close()


@pytest.fixture
def gunicorn_server(tmp_path: Path, store_backend: str | None) -> Iterator[Callable[..., Gunicorn]]:
    """Return a starter of real gunicorn servers; every one is stopped afterwards."""
    started: list[Gunicorn] = []

    def start(env: dict[str, str] | None = None, workers: int = 3, *, run: bool = True) -> Gunicorn:
        base = {key: value for key, value in os.environ.items() if key in {"PATH", "HOME"}}
        base.update({"INSTANCE_PATH": str(tmp_path / "instance"), "LOG_LEVEL": "WARNING"})
        if store_backend is not None:
            base["TOKEN_STORE_URL"] = store_backend
        base.update(env or {})
        server = Gunicorn(base, workers, tmp_path / f"gunicorn-{len(started)}.log")
        started.append(server)
        return server.start() if run else server  # run=False: the port is known, start later

    yield start
    for server in started:
        server.stop()


def fresh(method: str, url: str, **kwargs: Any) -> requests.Response:
    """Send one request on a new connection, so gunicorn may pick any worker."""
    with requests.Session() as session:
        return session.request(method, url, timeout=15, **kwargs)


def which(program: str) -> str | None:
    return shutil.which(program)


# --- refresh-token stores and redis-server ------------------------------------------


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
    """Run every test that builds an app or a server once per store backend.

    The Redis case is marked ``redis``, so ``make test-fast`` leaves it out; a
    test about one backend only says so with ``@pytest.mark.store("sqlite")``, and
    one that sets its own TOKEN_STORE_URL with ``@pytest.mark.own_store``. A module
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
    else:
        backends = marker.args if marker else STORE_BACKENDS
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
    """Return ``backend`` (with ``algorithm``) as a pytest parameter, marked ``redis`` for Redis."""
    marks = pytest.mark.redis if backend == "redis" else ()
    if algorithm is None:
        return pytest.param(backend, marks=marks)
    name = backend if algorithm == DEFAULT_ALGORITHM else f"{backend}-{algorithm}"
    return pytest.param(backend, algorithm, marks=marks, id=name)


@pytest.fixture
def store_backend(request: pytest.FixtureRequest) -> str | None:
    """Return the TOKEN_STORE_URL of the backend under test: None is SQLite's default file."""
    if request.param == "sqlite":
        return None
    return request.getfixturevalue("redis_url")


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Return a starter of real redis-servers (options as arguments); all stopped afterwards."""
    from tests.redis_server import INSTALL_HINT, RedisServer, redis_server_available

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
    from tests.redis_server import INSTALL_HINT, RedisServer, redis_server_available

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
    return request.getfixturevalue("redis_url")


def stored_contents(store: RefreshTokenStore) -> str:
    """Return, as text, everything ``store`` keeps: to show no token is kept in clear."""
    store.close()
    if isinstance(store, SQLiteTokenStore):
        folder = Path(store.path).parent  # the database with its -wal and -shm files
        return "\n".join(path.read_bytes().decode("latin-1") for path in folder.iterdir())
    assert isinstance(store, RedisTokenStore)
    parts = []
    with redis.Redis.from_url(store.url, decode_responses=True) as client:
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
