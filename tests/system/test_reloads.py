"""Reloads and restarts under load through nginx: no client request fails.

nginx runs the shipped site config (upstream keepalive included) in front of two
gunicorns on one store, each binding its own port as ``make run`` does, listed in one
upstream with ``max_fails=0`` (docs/deployment.md, "Reloads and restarts"). Clients from
addresses of their own keep sending GETs, DELETEs and POSTs (logins, refreshes with
rotation, reservations) while gunicorn reloads (HUP) and while both restart one after
the other. Every answer must be the expected one: nginx retries nothing that it had
sent of a POST, so a POST that failed would show here.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import socket
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers.servers import base_environment
from tests.helpers.tools import ROOT, require_tool
from tests.system.soak.client import Answer, Connection
from tests.system.soak.stack import SITE, Gunicorn, Nginx, nginx_binary, wait_for

CLIENTS = 6
#: Requests a second per client at most: load enough to meet every reload, cheap on a CI core.
RATE = 40
#: Seconds between one client's logins and refreshes: under nginx's 5 a second per address.
AUTH_EVERY = 0.3
#: Seconds between one client's revocations, which nginx limits the same way, on their own.
REVOKE_EVERY = 0.3


class Load:
    """Clients sending a fixed mix until stopped; every answer kept, with its phase."""

    def __init__(self, port: int):
        self.port = port
        self.answers: list[tuple[str, Answer]] = []
        self.phase = "warm-up"
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.client, args=(n,)) for n in range(CLIENTS)]
        self.errors: list[BaseException] = []

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(60)

    def client(self, number: int) -> None:
        try:
            self.loop(Connection(self.port, f"127.0.6.{number + 1}", "service"), f"user{number}")
        except BaseException as error:  # reported by the test
            self.errors.append(error)

    def call(self, connection: Connection, *args, **kwargs):
        answer, body = connection.request(*args, **kwargs)
        self.answers.append((self.phase, answer))
        return answer, body

    def loop(self, connection: Connection, username: str) -> None:
        tokens: dict = {}
        last_auth = last_revoke = 0.0
        for turn in range(20_000):  # bounded, and stopped long before
            if self.stopping.wait(1 / RATE):
                break
            if not tokens or time.monotonic() - last_auth > AUTH_EVERY:
                last_auth = time.monotonic()
                if not tokens or turn % 5 == 0:
                    answer, body = self.call(
                        connection, "login", "POST", "/login", (200,), body={"username": username}
                    )
                    if answer.status == 200:
                        tokens = body
                else:
                    answer, body = self.call(
                        connection,
                        "refresh",
                        "POST",
                        "/token",
                        (200,),
                        body={"username": username, "refreshToken": tokens["refreshToken"]},
                    )
                    tokens = {**tokens, **body} if answer.status == 200 else {}
                continue
            bearer = {"Authorization": f"Bearer {tokens['accessToken']}"}
            kind = turn % 3
            if kind == 2 and time.monotonic() - last_revoke > REVOKE_EVERY:
                last_revoke = time.monotonic()
                self.call(connection, "delete", "DELETE", f"/token/{secrets.token_hex(21)}", (204,))
            elif kind == 1:
                self.call(
                    connection,
                    "reservation",
                    "POST",
                    "/restaurant-reservation",
                    (200,),
                    body={"guestsCount": 2},
                    headers=bearer,
                )
            else:  # a GET, and in place of a revocation that would come too soon
                self.call(connection, "get", "GET", "/user-accessible", (200,), headers=bearer)
        connection.close()

    def wait_for_more(self, count: int) -> None:
        """Wait until ``count`` more answers have come."""
        target = len(self.answers) + count
        wait_for(lambda: len(self.answers) >= target, 20, f"{count} more answers")

    def during(self, phase: str) -> list[Answer]:
        return [answer for name, answer in self.answers if name == phase]


def failures_by_request(answers: list[Answer]) -> dict[str, int]:
    return dict(Counter(f"{a.method} {a.label} -> {a.status}" for a in answers if not a.ok))


def assert_none_failed(load: Load, phase: str) -> None:
    assert not load.errors
    answers = load.during(phase)
    counts = Counter(answer.method for answer in answers)
    assert min(counts[method] for method in ("GET", "POST", "DELETE")) >= 10, counts
    assert failures_by_request(answers) == {}, [a for a in answers if not a.ok][:5]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    require_tool(nginx_binary() is not None, "nginx", "apt-get install nginx")
    folder = tmp_path_factory.mktemp("reloads")
    env = {
        **base_environment(),
        "INSTANCE_PATH": str(folder / "instance"),
        "SIGNING_SECRET": secrets.token_urlsafe(48),
        "TRUSTED_PROXIES": "127.0.0.1/32",
        "OPEN_LOGIN": "true",
        "REFRESH_TOKEN_ROTATION": "true",
        "LOG_LEVEL": "WARNING",
    }
    services = [Gunicorn(name, env, 2, folder, bound=True) for name in ("a", "b")]
    proxy = Nginx("reloads", [s.port for s in services], folder / "nginx", "max_fails=0")
    try:
        for service in services:
            service.start()
        proxy.start()
        yield services, proxy
    finally:
        proxy.stop()
        for service in services:
            service.close()


@pytest.mark.nginx
@pytest.mark.gunicorn
def test_graceful_reload_fails_no_request(stack):
    services, proxy = stack
    with Load(proxy.port) as load:
        load.wait_for_more(100)
        load.phase = "HUP"
        before = {service.name: set(service.worker_pids()) for service in services}
        for service in services:
            service.hup()
        for service in services:
            wait_for(
                lambda s=service: not set(s.worker_pids()) & before[s.name], 30, "old workers gone"
            )
            service.wait_ready(30)
        load.wait_for_more(100)
    assert_none_failed(load, "HUP")


@pytest.mark.nginx
@pytest.mark.gunicorn
def test_rolling_restart_of_two_gunicorns_fails_no_request(stack):
    services, proxy = stack
    refused_before = proxy.error_log.read_text().count("(111: Connection refused)")
    with Load(proxy.port) as load:
        load.wait_for_more(100)
        load.phase = "restart"
        for service in services:  # one at a time: the other serves meanwhile
            service.restart(timeout=30)
            load.wait_for_more(50)
    assert_none_failed(load, "restart")
    # the test saw what it is about: nginx found a stopped gunicorn and passed requests on
    assert proxy.error_log.read_text().count("(111: Connection refused)") > refused_before


@pytest.mark.gunicorn
def test_a_stopping_worker_refuses_new_connections_and_answers_what_it_holds(tmp_path):
    env = {
        **base_environment(),
        "INSTANCE_PATH": str(tmp_path / "instance"),
        "LOG_LEVEL": "WARNING",
    }
    server = Gunicorn("one", env, 1, tmp_path, bound=True).start()
    try:
        (worker,) = server.worker_pids()
        # a request whose headers have not ended: the worker holds it, and stays to answer
        held = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        held.sendall(b"GET /healthz HTTP/1.1\r\nHost: test\r\n")
        client_port = held.getsockname()[1]
        wait_for(lambda: holds(worker, server.port, client_port), 10, "connection accepted")
        server.process.send_signal(signal.SIGTERM)

        def refused() -> bool:
            try:
                socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
            except ConnectionRefusedError:
                return True
            return False

        wait_for(refused, 10, "port refused")
        assert Path(f"/proc/{worker}").exists()  # refused by the worker, still there
        held.sendall(b"\r\n")
        answer = held.makefile("rb").read()
        assert answer.startswith(b"HTTP/1.1 200 ")
        assert b"\r\nConnection: close\r\n" in answer
        held.close()
        server.process.wait(30)
    finally:
        server.close()


def holds(pid: int, port: int, client_port: int) -> bool:
    """Return whether process ``pid`` has accepted the connection from ``client_port``."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, inode = fields[1], fields[2], fields[9]
        if int(local.split(":")[1], 16) == port and int(remote.split(":")[1], 16) == client_port:
            links = []
            for entry in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    links.append(os.readlink(entry))
            return f"socket:[{inode}]" in links
    return False


def upstream_keepalive_timeout(text: str) -> float:
    (value,) = re.findall(r"^\s*keepalive_timeout (\d+)s;", text, re.M)
    return float(value)


def test_nginx_closes_idle_connections_before_any_gunicorn_worker_does():
    from gunicorn.workers import gthread

    text = SITE.read_text()
    config = (ROOT / "app" / "serving" / "gunicorn_config.py").read_text()
    (gunicorn_keepalive,) = re.findall(r"^keepalive = (\d+)", config, re.M)
    nginx_timeout = upstream_keepalive_timeout(text)
    assert nginx_timeout < gthread.STOP_KEEPALIVE_LINGER  # a stopping worker's
    assert nginx_timeout < float(gunicorn_keepalive)  # a running worker's


def test_shipped_config_never_passes_a_sent_post_to_another_server():
    text = SITE.read_text()
    assert re.findall(r"^\s*proxy_next_upstream ([^;]*);", text, re.M) == ["error timeout"]
    assert "non_idempotent" not in re.sub(r"#.*", "", text)
