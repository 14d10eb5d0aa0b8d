"""The one launcher: every app under gunicorn with the service's own gunicorn.conf.py.

The service, the floor and the peers all start as ``make run`` starts the service:
``gunicorn -c gunicorn.conf.py <app>``, so they share every gunicorn setting (workers,
threads, keep-alive, logging configuration and logger class, hooks), and differ only in
the WSGI app loaded. Each listens on a loopback port it inherits already bound, writes its
output to a file of its own, and is stopped by its PID. Every service starts with a
CLIENTS_FILE of one registered client (its OAuth endpoints on) and the default token shape
(no TOKEN_ISSUER or TOKEN_AUDIENCE). The stores (a redis-server with
AOF, a PostgreSQL cluster) and nginx are started the same way, once per ``Stack``.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from bench import clients
from bench.scenarios import HOLDER_SESSIONS, REQUESTS, SERVICE, UPSTREAM_ANSWER, App
from tests.helpers.servers import base_environment, free_port, listening_socket

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy" / "nginx"
APPLICATIONS = {
    "service": "wsgi:app",
    "floor": "bench.request_line:logged('bench.floor_app')",
    "pyjwt": "bench.request_line:logged('bench.peers.pyjwt_peer')",
    "jwt-extended": "bench.request_line:logged('bench.peers.jwt_extended_peer')",
}
#: What a bench run changes of the service's defaults: a token outlives any run, and no
#: rate limit on /login and /token, which the bench floods from one address.
SERVICE_SETTINGS = {"ACCESS_TOKEN_LIFETIME": "86400", "RATE_LIMIT_AUTH": "off"}
PEER_SETTINGS = {"FLASK_ACCESS_TOKEN_LIFETIME": "86400"}
#: The requests whose answers the floor replays, recorded from the service.
FLOOR_REQUESTS = ("a", "b", "c", "d", "f", "s")
SITE = """
upstream bench_upstream {{ server 127.0.0.1:{upstream}; keepalive 16; }}
proxy_cache_path {folder}/verdicts levels=1:2 use_temp_path=off
                 keys_zone=token_service_verdicts:1m max_size=16m inactive=60s;
server {{
    listen 127.0.0.1:{port};
    access_log off;
    include {deploy}/gateway-check.conf;
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    location = /app {{
        {check}
        proxy_pass http://bench_upstream/app;
    }}
    location = /never-asked {{  # both sides' nginx the same, but for /app's check
        auth_request /_token_service/check;
        include {deploy}/gateway-identity.conf;
        proxy_pass http://bench_upstream/app;
    }}
}}
"""
CHECK = f"auth_request /_token_service/check; include {DEPLOY}/gateway-identity.conf;"


def children(pid: int) -> list[int]:
    """Return the PIDs of the live children of ``pid`` (Linux)."""
    with contextlib.suppress(OSError):
        return [
            int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        ]
    return []


def cpu_seconds(pid: int) -> float:
    """Return the CPU seconds of ``pid`` and its children so far, reaped children included."""
    ticks = 0
    for process in [pid, *children(pid)]:
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{process}/stat").read_text()
            # fields 14..17 (utime, stime, cutime, cstime), after the name in parentheses
            ticks += sum(int(value) for value in stat[stat.rindex(")") + 2 :].split()[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int | None:
    """Return the resident set size of ``pid`` in KiB (VmRSS), None once it is gone."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def pin(pid: int, cpus: set[int]) -> None:
    """Run every thread of ``pid`` and of its children on ``cpus``.

    Threads started later (gthread's pool grows on demand) inherit the affinity of the
    thread that starts them, which is pinned here too.
    """
    for process in [pid, *children(pid)]:
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{process}/task"):
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(int(task), cpus)


def stop(process: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
    """Stop ``process`` by its PID: ``sig``, then KILL if it lingers."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)


@dataclass
class Gunicorn:
    """One app under ``gunicorn -c gunicorn.conf.py``, on a loopback port it inherits bound."""

    name: str
    application: str
    env: dict[str, str]
    log_path: Path
    listener: socket.socket = field(default_factory=lambda: listening_socket(backlog=2048))
    process: subprocess.Popen | None = None
    _log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> Gunicorn:
        descriptor = self.listener.fileno()
        command = [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py",
                   "-b", f"fd://{descriptor}", self.application]  # fmt: skip
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=self.env, stdout=self._log, stderr=subprocess.STDOUT,
            pass_fds=(descriptor,),
        )  # fmt: skip
        return self

    def wait_ready(self, timeout: float = 90) -> None:
        """Wait until it answers HTTP, its workers run, and it sits idle."""
        deadline = time.monotonic() + timeout
        while not self._answers() or len(children(self.pid)) < int(self.env["WEB_CONCURRENCY"]):
            self._check(deadline)
            time.sleep(0.1)
        last = cpu_seconds(self.pid)  # workers booting after the first still import the app
        while True:
            time.sleep(0.3)
            now = cpu_seconds(self.pid)
            if now - last < 0.02:
                return
            self._check(deadline)
            last = now

    def _answers(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited; its log:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=5):
                return True
        except urllib.error.HTTPError:
            return True  # any HTTP answer (the floor and the peers have no /healthz)
        except OSError:
            return False

    def _check(self, deadline: float) -> None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{self.name} did not start in time; its log:\n{self.log_tail()}")

    def log_tail(self, size: int = 3000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_bytes()[-size:].decode("utf-8", "replace")
        return ""

    def log_warnings(self, limit: int = 10) -> list[str]:
        """Return the last warnings and errors of its log, but for the expected start ones."""
        marks = ("[WARNING]", "[ERROR]", "[CRITICAL]", '"WARNING"', '"ERROR"', "Traceback")
        found: collections.deque[str] = collections.deque(maxlen=limit)
        with contextlib.suppress(OSError), self.log_path.open(errors="replace") as log:
            found.extend(
                line.rstrip("\n") for line in log
                if any(mark in line for mark in marks) and "USERS_FILE is not set" not in line
            )  # fmt: skip
        return list(found)

    def stop(self) -> None:
        if self.process is not None:
            stop(self.process)
        if self._log is not None:
            self._log.close()
        self.listener.close()


@dataclass
class Side:
    """A started app: where its requests go, and the processes whose CPU it costs."""

    app: App
    url: str
    pids: list[int]
    login_url: str = ""  # where it issues tokens, if it does
    secret: str = ""
    service: Gunicorn | None = None  # the service's own gunicorn, if the side has one
    client_authorization: str = ""  # the service's registered client, as HTTP Basic

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(pid) for pid in self.pids)


class Stack:
    """Starts what a group's pairs need, each app once, and stops it all at the end."""

    def __init__(self, folder: Path, distinct_tokens: int) -> None:
        self.folder = folder
        self.distinct_tokens = distinct_tokens
        self.sides: dict[App, Side] = {}
        self.credentials: dict[App, clients.Credentials] = {}
        self.gunicorns: list[Gunicorn] = []
        self.others: list[Any] = []  # store servers and nginx: anything with stop()
        self.stores: dict[str, Any] = {}
        self.floor_answers: Path | None = None
        self.serial = 0
        self.workers = "2"

    def __enter__(self) -> Stack:
        self.folder.chmod(0o755)  # nginx's workers (nobody, under root) reach the verdicts
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _next(self, prefix: str) -> Path:
        self.serial += 1
        path = self.folder / f"{prefix}{self.serial}"
        path.mkdir(mode=0o700)
        return path

    def environment(self, instance: Path, **settings: str) -> dict[str, str]:
        """Every app's: its own instance folder, the service's worker count (at least 2)."""
        workers = os.environ.get("WEB_CONCURRENCY") or str(max(2, os.cpu_count() or 1))
        self.workers = workers
        return {**base_environment(), "INSTANCE_PATH": str(instance), "WEB_CONCURRENCY": workers,
                **settings}  # fmt: skip

    def side(self, app: App) -> Side:
        """Return ``app`` started (and waited for), starting it on first use."""
        if app not in self.sides:
            if app.proxy in ("caddy", "caddy-gateway"):
                self.sides[app] = self._caddied(app)
            else:
                self.sides[app] = self._proxied(app) if app.proxy else self._start(app)
        return self.sides[app]

    def held(self, app: App, service_side: App) -> clients.Credentials:
        """Return the tokens ``app``'s requests carry: its own, or the service side's."""
        owner = app if app.own_credentials else service_side
        if owner not in self.credentials:
            side = self.side(owner)
            self.credentials[owner] = clients.credentials(
                side.login_url, side.secret, self.distinct_tokens, self.folder,
                logins=HOLDER_SESSIONS if owner.kind == "service" else 1,
                client_authorization=side.client_authorization,
            )  # fmt: skip
        return self.credentials[owner]

    def _start(self, app: App, answers: Path | None = None) -> Side:
        """Start one gunicorn for ``app`` (never shared: each side has its own)."""
        instance = self._next("app-")
        name = app.name
        secret = secrets.token_urlsafe(48)
        client = ""
        if app.kind == "service":
            url = self.store_url(app.store, instance)
            if app.prefill:
                prefill(url, app.prefill, self.stores.get("redis"))
            env = self.environment(instance, **SERVICE_SETTINGS, **dict(app.settings))
            client = clients.register_client(instance / "clients.json")
            env |= {"SIGNING_SECRET": secret, "TOKEN_STORE_URL": url,
                    "CLIENTS_FILE": str(instance / "clients.json")}  # fmt: skip
        elif app.kind == "floor":
            env = self.environment(instance, FLOOR_ANSWERS=str(answers or self.answers()))
            if app.store_floor:
                from bench import store_floor

                url = self.store_url(app.store, instance)
                env |= {"FLOOR_STORE_URL": url, "FLOOR_KNOWN_DIGEST": secrets.token_hex(32)}
                store_floor.prepare(url, env["FLOOR_KNOWN_DIGEST"])
        else:
            env = self.environment(instance, **PEER_SETTINGS)
            env |= {"FLASK_SECRET_KEY": secret, "FLASK_DATABASE": str(instance / "peer.sqlite3")}
            module = APPLICATIONS[app.kind].split("'")[1]
            completed = subprocess.run(
                [sys.executable, "-m", "flask", "--app", module, "init-db"],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            if completed.returncode != 0:
                raise RuntimeError(f"{module} init-db failed:\n{completed.stderr[-2000:]}")
        server = Gunicorn(name, APPLICATIONS[app.kind], env, instance / "output.log").start()
        self.gunicorns.append(server)
        server.wait_ready()
        own = app.kind != "floor"
        return Side(app, server.url, [server.pid], server.url if own else "", secret,
                    server if app.kind == "service" else None, client)  # fmt: skip

    def _proxied(self, app: App) -> Side:
        """Start nginx before an upstream floor, with the service's check first (gateway)."""
        folder = self._next("nginx-")
        answers = folder / "upstream.json"
        answers.write_text(json.dumps({"GET /app": UPSTREAM_ANSWER}))
        upstream = self._start(App("floor"), answers)
        service = None
        if app.proxy == "gateway":
            service = self._start(App(app.kind, app.store, settings=app.settings))
        folder.chmod(0o755)
        port = free_port()
        service_port = service.url.rsplit(":", 1)[1] if service else str(free_port())
        conf = (DEPLOY / "token-service.conf").read_text()
        for old, new in [
            ("listen 80 default_server;", f"listen 127.0.0.1:{free_port()};"),
            ("    listen [::]:80 default_server;\n", ""),
            ("server 127.0.0.1:8080;", f"server 127.0.0.1:{service_port};"),
            ("/var/log/nginx/token-service.access.log", str(folder / "access.log")),
            ("/var/log/nginx/error.log", str(folder / "error.log")),
        ]:
            conf = conf.replace(old, new)
        site = SITE.format(folder=folder, port=port, upstream=upstream.url.rsplit(":", 1)[1],
                           deploy=DEPLOY, check=CHECK if service else "")  # fmt: skip
        temp = "\n".join(f"{kind}_temp_path {folder}/{kind};" for kind in ("client_body", "proxy"))
        (folder / "nginx.conf").write_text(
            f"daemon off;\nworker_processes 1;\npid {folder}/nginx.pid;\n"
            f"error_log {folder}/error.log warn;\nevents {{ worker_connections 1024; }}\n"
            f"http {{\n{temp}\naccess_log off;\n{conf}\n{site}\n}}\n"
        )
        binary = shutil.which("nginx", path="/usr/sbin:/usr/bin:/sbin")
        if binary is None:
            raise RuntimeError("nginx is needed: apt-get install nginx")
        command = [binary, "-p", str(folder), "-c", str(folder / "nginx.conf")]
        command += ["-e", str(folder / "error.log")]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.others.append(_Stoppable(process))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 15
        while True:
            try:
                urllib.request.urlopen(f"{url}/_nothing", timeout=2).close()
            except urllib.error.HTTPError:
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"nginx did not start: {(folder / 'error.log').read_text()[-2000:]}"
                    ) from None
                time.sleep(0.1)
        pids = [process.pid, *upstream.pids, *(service.pids if service else [])]
        if service is None:
            return Side(app, url, pids)
        return Side(app, url, pids, service.login_url, service.secret, service.service,
                    service.client_authorization)  # fmt: skip

    def _caddied(self, app: App) -> Side:
        """Start Caddy before an upstream floor: the shipped Caddyfile (the service's check
        first, caddy-gateway), or the same site proxying straight to the upstream (caddy)."""
        folder = self._next("caddy-")
        answers = folder / "upstream.json"
        answers.write_text(json.dumps({"GET /app": UPSTREAM_ANSWER}))
        upstream = self._start(App("floor"), answers)
        service = None
        if app.proxy == "caddy-gateway":
            service = self._start(App(app.kind, app.store, settings=app.settings))
        port = free_port()
        upstream_address = f"127.0.0.1:{upstream.url.rsplit(':', 1)[1]}"
        if service is None:
            site = f"http://:{port} {{\n\tbind 127.0.0.1\n\treverse_proxy {upstream_address}\n}}\n"
        else:
            site = (ROOT / "deploy" / "caddy" / "Caddyfile").read_text()
            for old, new in [
                ("app.example.com {", f"http://:{port} {{\n\tbind 127.0.0.1"),
                ("forward_auth 127.0.0.1:8080 {",
                 f"forward_auth 127.0.0.1:{service.url.rsplit(':', 1)[1]} {{"),
                ("reverse_proxy 127.0.0.1:9000 {", f"reverse_proxy {upstream_address} {{"),
            ]:  # fmt: skip
                if site.count(old) != 1:
                    raise RuntimeError(f"deploy/caddy/Caddyfile: no single {old!r}")
                site = site.replace(old, new)
        (folder / "Caddyfile").write_text("{\n\tadmin off\n}\n\n" + site)
        binary = shutil.which("caddy")
        if binary is None:
            raise RuntimeError("caddy is needed: apt-get install caddy")
        env = {**base_environment(), "HOME": str(folder), "XDG_CONFIG_HOME": str(folder),
               "XDG_DATA_HOME": str(folder)}  # fmt: skip
        command = [binary, "run", "--config", str(folder / "Caddyfile"), "--adapter", "caddyfile"]
        with (folder / "caddy.log").open("ab") as log:
            process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.others.append(_Stoppable(process))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"caddy did not start: {(folder / 'caddy.log').read_text()[-2000:]}"
                    ) from None
                time.sleep(0.1)
        pids = [process.pid, *upstream.pids, *(service.pids if service else [])]
        if service is None:
            return Side(app, url, pids)
        return Side(app, url, pids, service.login_url, service.secret, service.service,
                    service.client_authorization)  # fmt: skip

    def answers(self) -> Path:
        """Write the floor's answers once: the service's own, recorded."""
        if self.floor_answers is None:
            service = self.side(SERVICE)
            held = self.held(SERVICE, SERVICE)
            recorded = {
                REQUESTS[key].route: clients.floor_answer(
                    clients.check(service.url, REQUESTS[key], held)
                )
                for key in FLOOR_REQUESTS
            }
            self.floor_answers = self.folder / "floor.json"
            self.floor_answers.write_text(json.dumps(recorded))
        return self.floor_answers

    def store_url(self, store: str, instance: Path) -> str:
        """Return a store of the app's own: a SQLite file, a Redis database, a PostgreSQL one."""
        if store == "sqlite":
            return f"sqlite:///{instance / 'tokens.sqlite3'}"
        if store == "redis":
            from tests.helpers.redis_server import DURABLE, RedisServer

            if "redis" not in self.stores:
                self.stores["redis"] = RedisServer(self.folder / "redis", options=DURABLE).start()
                self.others.append(self.stores["redis"])
            self.stores["redis-databases"] = number = self.stores.get("redis-databases", -1) + 1
            return self.stores["redis"].url.removesuffix("/0") + f"/{number}"
        from tests.helpers.postgres_server import PostgresServer

        if "postgresql" not in self.stores:
            self.stores["postgresql"] = server = PostgresServer().start()
            self.others.append(_Removable(server))
        return self.stores["postgresql"].create_database(instance.name.replace("-", "_"))

    def store_pids(self) -> list[int]:
        """Return the store servers' main processes (kept off the apps' CPU)."""
        return [server.process.pid for name, server in self.stores.items()
                if name != "redis-databases" and server.process is not None]  # fmt: skip

    def warnings(self) -> dict[str, list[str]]:
        return {server.name: server.log_warnings() for server in self.gunicorns}

    def close(self) -> None:
        for server in self.gunicorns:  # TERM to all first, so they wind down together
            if server.process is not None and server.process.poll() is None:
                server.process.send_signal(signal.SIGTERM)
        for server in self.gunicorns:
            server.stop()
        for other in reversed(self.others):
            other.stop()


@dataclass
class _Stoppable:
    process: subprocess.Popen

    def stop(self) -> None:
        stop(self.process, timeout=10)


@dataclass
class _Removable:
    server: Any

    def stop(self) -> None:
        self.server.remove()


def missing(store: str) -> str | None:
    """Return why the bench cannot start ``store`` here, or None."""
    if store == "redis":
        from tests.helpers.redis_server import redis_server_available

        return (
            None if redis_server_available() else "no redis-server (apt-get install redis-server)"
        )
    if store == "postgresql":
        try:
            from tests.helpers.postgres_server import postgres_available
        except ImportError:
            return "psycopg is not installed"
        return (
            None
            if postgres_available()
            else "no PostgreSQL server programs (apt-get install postgresql)"
        )
    return None


def prefill(url: str, count: int, redis_server: Any = None) -> None:
    """Put ``count`` refresh tokens in the store at ``url``, through the store's own ``issue``.

    Four tokens per user. Redis writes without its fsync meanwhile (then ``always`` again);
    PostgreSQL commits them without waiting for the disk (``relaxed``).
    """
    from app.backends import backend_at

    durability = "relaxed" if url.startswith("postgresql") else "normal"
    store = backend_at(url, timeout=30, durability=durability).store
    store.ping()  # as the service does first: a new store records its layout's version
    salt = secrets.token_hex(8)
    with _fsync_off(redis_server):
        for number in range(count):
            store.issue(f"{salt}-{number}", f"user{number // 4}")
    store.close()


@contextlib.contextmanager
def _fsync_off(redis_server: Any) -> Any:
    if redis_server is None:
        yield
        return
    with redis_server.client() as client:
        client.config_set("appendfsync", "no")
        try:
            yield
        finally:
            client.config_set("appendfsync", "always")


def stored(url: str) -> int:
    """Return how many refresh tokens the store at ``url`` holds."""
    from app.backends import backend_at

    store = backend_at(url, timeout=30).store
    try:
        return store.count()
    finally:
        store.close()
