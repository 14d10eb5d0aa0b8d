"""A real multi-worker gunicorn: any worker honours any other's tokens, across restarts."""

from __future__ import annotations

import contextlib
import http.client
import io
import ipaddress
import json
import os
import random
import runpy
import socket
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import jwt
import pytest
import requests

from app.observability.metric_files import FOLDER_VARIABLE
from app.observability.metrics_scrape import MULTIPROCESS_FOLDER
from tests.helpers.servers import free_port, fresh, stop_process, wait_until
from tests.helpers.tools import ROOT

pytestmark = pytest.mark.gunicorn

CYCLES = 200


def login_cycle(url: str, username: str) -> None:
    """Log in, call a protected endpoint, refresh, revoke, and check every answer."""
    response = fresh("POST", f"{url}/login", json={"username": username, "password": "pw"})
    assert response.status_code == 200, response.text
    tokens = response.json()
    bearer = {"Authorization": f"Bearer {tokens['accessToken']}"}
    response = fresh("GET", f"{url}/user-accessible", headers=bearer)
    assert response.status_code == 200, response.text
    assert response.json()["user"]["username"] == username
    body = {"username": username, "refreshToken": tokens["refreshToken"]}
    response = fresh("POST", f"{url}/token", data=body)
    assert response.status_code == 200, response.text
    bearer = {"Authorization": f"Bearer {response.json()['accessToken']}"}
    response = fresh(
        "POST", f"{url}/restaurant-reservation", headers=bearer, json={"guestsCount": 3}
    )
    assert response.json()["guestsCount"] == 3
    response = fresh("DELETE", f"{url}/token/{tokens['refreshToken']}")
    assert response.status_code == 204
    assert response.content == b""
    response = fresh("POST", f"{url}/token", json=body)
    assert response.status_code == 401
    assert response.text == "Unauthorized"


def test_every_worker_honours_every_other_workers_tokens(gunicorn_server, signing_secret):
    server = gunicorn_server({"SIGNING_SECRET": signing_secret}, workers=4)
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda n: login_cycle(server.url, f"user{n}"), range(CYCLES)))
    assert len(server.worker_pids()) == 4  # no worker died on the way


def test_tokens_survive_a_restart_with_the_generated_secret(gunicorn_server, tmp_path):
    server = gunicorn_server(workers=3)  # no SIGNING_SECRET: generated in the instance folder
    issued = [
        fresh("POST", f"{server.url}/login", json={"username": f"u{n}"}).json() for n in range(20)
    ]
    server.stop()
    restarted = gunicorn_server(workers=3)
    for n, tokens in enumerate(issued):
        bearer = {"Authorization": f"Bearer {tokens['accessToken']}"}
        response = fresh("GET", f"{restarted.url}/user-accessible", headers=bearer)
        assert response.status_code == 200
        body = {"username": f"u{n}", "refreshToken": tokens["refreshToken"]}
        assert fresh("POST", f"{restarted.url}/token", json=body).status_code == 200


def test_workers_starting_together_agree_on_the_generated_secret(gunicorn_server, tmp_path):
    server = gunicorn_server(workers=4)
    secret_file = tmp_path / "instance" / "signing_secret"
    secret = secret_file.read_text().strip()
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600

    def login_and_decode(n: int) -> str:
        token = fresh("POST", f"{server.url}/login", json={"username": f"u{n}"}).json()
        # every worker signed with the one secret on disk, or this raises
        return jwt.decode(token["accessToken"], secret, algorithms=["HS256"])["username"]

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert sorted(pool.map(login_and_decode, range(80))) == sorted(f"u{n}" for n in range(80))
    leftovers = [path.name for path in secret_file.parent.iterdir() if path.suffix == ".tmp"]
    assert leftovers == []


def test_request_log_never_shows_a_refresh_token_or_bearer_token(gunicorn_server, tmp_path):
    server = gunicorn_server(workers=2)
    tokens = fresh("POST", f"{server.url}/login", json={"username": "logged"}).json()
    bearer = {"Authorization": f"Bearer {tokens['accessToken']}"}
    fresh("GET", f"{server.url}/user-accessible", headers=bearer)
    fresh(
        "POST",
        f"{server.url}/token",
        json={"username": "x", "refreshToken": tokens["refreshToken"]},
    )
    assert fresh("DELETE", f"{server.url}/token/{tokens['refreshToken']}").status_code == 204
    server.stop()
    log = server.log_path.read_text()
    lines = [json.loads(line) for line in log.splitlines() if line.startswith('{"time"')]
    assert {"method": "DELETE", "path": "/token/<redacted>", "status": 204}.items() <= next(
        line.items() for line in lines if line.get("method") == "DELETE"
    )
    assert tokens["refreshToken"] not in log
    assert tokens["accessToken"] not in log


def test_oversized_header_is_a_4xx_not_a_5xx(shared_gunicorn):
    server = shared_gunicorn(workers=2)
    headers = {"Authorization": "Bearer " + "a" * 20000}
    response = fresh("GET", f"{server.url}/user-accessible", headers=headers)
    assert 400 <= response.status_code < 500


def test_bad_input_over_the_wire_is_json(shared_gunicorn):
    server = shared_gunicorn(workers=2)
    response = fresh(
        "POST", f"{server.url}/login", data="{", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert json.loads(response.text) == {"message": "request body is not valid JSON"}
    response = fresh(
        "POST",
        f"{server.url}/login",
        data="x" * 20000,
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 413


def raw_request(port: int, request: bytes) -> bytes:
    """Send raw bytes on a new connection; return everything the server answers."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(request)
        connection.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    return answer


def chunked_login(port: int, chunks: list[bytes], content_type: bytes) -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for chunk in chunks) + b"0\r\n\r\n"
    return raw_request(
        port,
        b"POST /login HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Type: " + content_type + b"\r\n\r\n" + body,
    )


def test_chunked_body_over_the_limit_is_413_over_the_wire(shared_gunicorn):
    server = shared_gunicorn(workers=1)
    chunks = [b"x=" + b"a" * 16367, b"&username=administrator"]
    answer = chunked_login(server.port, chunks, b"application/x-www-form-urlencoded")
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert answer.endswith(b'{"message":"request body is larger than 16384 bytes"}\n')
    answer = chunked_login(
        server.port, [b"username=", b"alice"], b"application/x-www-form-urlencoded"
    )
    assert answer.startswith(b"HTTP/1.1 200 ")


def test_malformed_chunk_framing_is_400_not_500(gunicorn_server):
    server = gunicorn_server(workers=1)
    answer = raw_request(
        server.port,
        b"POST /login HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Type: application/json\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    )
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b'{"message":"request body is malformed"}' in answer
    server.stop()
    assert "Traceback" not in server.log_path.read_text()


def test_logs_never_show_a_refresh_token_however_spelled(gunicorn_server):
    server = gunicorn_server(workers=1)
    token = fresh("POST", f"{server.url}/login", json={"username": "a"}).json()["refreshToken"]
    raw_request(
        server.port, b"DELETE /token/" + token.encode() + b"\x7f HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    answer = raw_request(
        server.port, f"DELETE /%74oken/{token} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    )
    assert answer.startswith(b"HTTP/1.1 204 ")
    server.stop()
    log = server.log_path.read_text()
    assert '"path":"/token/<redacted>","status":204' in log  # decoded as routed, then redacted
    assert token not in log


def test_connections_stay_open_between_requests(shared_gunicorn):
    # gthread workers with keepalive: nginx's upstream keepalive (and any client) reuses them
    server = shared_gunicorn(workers=2)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as connection:
        for _ in range(3):
            connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            while not answer.endswith(b'{"status":"ok"}\n'):
                chunk = connection.recv(65536)
                assert chunk, "the connection was closed after one request"
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200 ")
            assert b"Connection: close" not in answer


# --- forwarded headers, straight to gunicorn ------------------------------------------

#: Addresses and values a client sent in X-Forwarded-For to escape the rate limit.
SPOOFS = {
    "loopback": lambda n: "127.0.0.1",
    "mapped loopback": lambda n: "::ffff:127.0.0.1",
    "long ::1": lambda n: "0:0:0:0:0:0:0:1",
    "other loopback": lambda n: "127.255.1.2",
    "random address": lambda n: f"198.51.{n}.{random.randrange(1, 255)}",
    "not an address": lambda n: f"client-{n}-{random.randrange(10**6)}",
}
#: Every spoofed address above would be exempt if it were believed; the test clients'
#: own addresses (127.0.0.20 and up) are not.
SPOOF_EXEMPT = "127.0.0.1/32, 127.255.0.0/16, ::1"
LIMIT = 5


def refreshes_until_refused(port: int, source: str, spoof) -> list[int]:
    """Send LIMIT + 1 refreshes from ``source``, each with a spoofed X-Forwarded-For."""
    connection = http.client.HTTPConnection(
        "127.0.0.1", port, timeout=10, source_address=(source, 0)
    )
    statuses = []
    try:
        for n in range(LIMIT + 1):
            body = json.dumps({"username": "alice", "refreshToken": "x" * 42})
            headers = {"Content-Type": "application/json", "X-Forwarded-For": spoof(n)}
            connection.request("POST", "/token", body=body, headers=headers)
            response = connection.getresponse()
            response.read()
            statuses.append(response.status)
    finally:
        connection.close()
    return statuses


def logged_clients(server) -> set[str]:
    return {
        json.loads(line)["client"]
        for line in server.log_path.read_text().splitlines()
        if line.startswith('{"time"') and '"logger":"request"' in line and "/token" in line
    }


@pytest.mark.store("sqlite")  # the counters' store is not what this is about
@pytest.mark.parametrize(
    ("trusted", "spoofs"),
    [
        ("", list(SPOOFS)),  # the default: no proxy trusted, every spoof is the peer's own
        # the peer is trusted, the header believed: a forwarded address is never exempt
        # (each counted as itself; ::ffff:127.0.0.1 would share 127.0.0.1's counter)
        ("127.0.0.0/8", ["loopback", "long ::1", "other loopback"]),
    ],
)
def test_every_spoof_sent_straight_to_gunicorn_is_counted_and_limited(
    gunicorn_server, trusted, spoofs
):
    env = {
        "RATE_LIMIT_AUTH": f"{LIMIT} per minute",
        "RATE_LIMIT_EXEMPT": SPOOF_EXEMPT,
        "LOG_LEVEL": "INFO",
    }
    if trusted:
        env.update(TRUSTED_PROXIES=trusted, OPEN_LOGIN="true")
    server = gunicorn_server(env, workers=1)
    sources = [f"127.0.0.{20 + number}" for number in range(len(spoofs))]
    for source, name in zip(sources, spoofs, strict=True):
        statuses = refreshes_until_refused(server.port, source, SPOOFS[name])
        assert statuses == [401] * LIMIT + [429], name
    if not trusted:
        wait_until(lambda: len(logged_clients(server)) == len(sources), 5, "request log")
        assert logged_clients(server) == set(sources)  # the peer, never the header


@pytest.mark.store("sqlite")
def test_a_direct_gunicorn_tolerates_workers_times_threads_slow_header_clients(gunicorn_server):
    # Measured for the README: a connection whose headers never end holds one thread
    # (gthread reads headers blocking, with no timeout), so WEB_CONCURRENCY x 4 threads
    # of them stall the service. Behind nginx, nginx holds them instead.
    server = gunicorn_server(workers=1)  # 1 worker x 4 threads (gunicorn.conf.py)
    slow: list[socket.socket] = []
    try:
        for number in range(4):
            connection = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            connection.sendall(b"POST /login HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\n")
            slow.append(connection)
            time.sleep(0.3)  # the worker hands it a thread
            if number < 3:
                assert fresh_get(server.url, timeout=5) == 200, number
        with pytest.raises(requests.Timeout):
            fresh_get(server.url, timeout=2)  # the fourth took the last thread
        slow.pop().close()
        assert fresh_get(server.url, timeout=5) == 200
    finally:
        for connection in slow:
            connection.close()


def fresh_get(url: str, timeout: float) -> int:
    with requests.Session() as session:
        return session.get(f"{url}/healthz", timeout=timeout).status_code


# --- the bind address -------------------------------------------------------------------


def listening_addresses(port: int) -> set[str]:
    """Return the local addresses of the sockets listening on ``port`` (IPv4 and IPv6)."""
    found = set()
    for table, width in (("tcp", 8), ("tcp6", 32)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            local, _, state = line.split()[1:4]
            address, port_hex = local.split(":")
            if state == "0A" and int(port_hex, 16) == port:  # 0A: LISTEN
                raw = bytes.fromhex(address)
                if width == 8:
                    found.add(str(ipaddress.IPv4Address(raw[::-1])))
                else:  # four little-endian 32-bit words
                    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                    found.add(str(ipaddress.IPv6Address(words)))
    return found


def test_make_run_listens_on_loopback_only(tmp_path):
    recipe = subprocess.run(
        ["make", "--no-print-directory", "-n", "-C", str(ROOT), "run", f"VENV={tmp_path}/venv"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.splitlines()[-1]  # fmt: skip
    assert recipe == f"{tmp_path}/venv/bin/gunicorn -c gunicorn.conf.py wsgi:app"
    port = free_port()
    env = {
        "PATH": os.environ["PATH"],
        "PORT": str(port),
        "WEB_CONCURRENCY": "1",
        "INSTANCE_PATH": str(tmp_path / "instance"),
    }
    log = tmp_path / "gunicorn.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "wsgi:app"],
            cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            wait_until(lambda: "Booting worker" in log.read_text(), 20, "gunicorn")
            assert listening_addresses(port) == {"127.0.0.1"}
            assert fresh_get(f"http://127.0.0.1:{port}", timeout=10) == 200
        finally:
            stop_process(process)
    text = log.read_text()
    assert "USERS_FILE is not set" in text
    assert "OPEN LOGIN" not in text


class Listener(SimpleNamespace):
    """A listener of gunicorn's: its socket, shown as its URL."""

    def __init__(self, sock: SimpleNamespace, bind: str) -> None:
        super().__init__(sock=sock, bind=bind)

    def __str__(self) -> str:
        return f"http://{self.bind}"


class WhenReadyServer:
    """What gunicorn.conf.py's when_ready reads of gunicorn's server: its one listener on
    ``bind`` (none is bound), and a log that prints its warnings."""

    def __init__(self, bind: str) -> None:
        host, port = bind.rsplit(":", 1)
        socket_ = SimpleNamespace(getsockname=lambda: (host.strip("[]"), int(port)))
        self.LISTENERS = [Listener(socket_, bind)]
        self.log = SimpleNamespace(warning=lambda message, *args: print(message % args))


def when_ready(tmp_path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run gunicorn.conf.py, then its when_ready, with only ``env``'s settings, in this
    process (no socket is bound, and no Python of its own is started for it): a
    ``sys.exit(message)`` is exit status 1 with the message on stderr, as in gunicorn."""
    env = {"INSTANCE_PATH": str(tmp_path / "i"), **env}
    bind = env.pop("WHEN_READY_BIND", None)
    output = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(output):
        patch.delenv(FOLDER_VARIABLE, raising=False)
        for name, value in env.items():
            patch.setenv(name, value)
        try:
            conf = runpy.run_path(str(ROOT / "gunicorn.conf.py"))
            # the listener gunicorn would make of HOST, or of a bind given beside the config
            conf["when_ready"](WhenReadyServer(bind or conf["bind"][0]))
        except SystemExit as stop:
            if isinstance(stop.code, str):
                return subprocess.CompletedProcess([], 1, output.getvalue(), f"{stop.code}\n")
            return subprocess.CompletedProcess([], stop.code or 0, output.getvalue(), "")
    return subprocess.CompletedProcess([], 0, output.getvalue(), "")


BEHIND = {"BEHIND_PROXY": "true"}


@pytest.mark.parametrize(
    ("env", "reached"),
    [
        ({"HOST": "0.0.0.0", **BEHIND, "OPEN_LOGIN": "true"}, "http://0.0.0.0:8080"),
        ({"HOST": "::", **BEHIND, "OPEN_LOGIN": "true"}, "http://[::]:8080"),
        ({"HOST": "192.0.2.10", **BEHIND, "OPEN_LOGIN": "true"}, "http://192.0.2.10:8080"),
        ({"TRUSTED_PROXIES": "127.0.0.1/32", "OPEN_LOGIN": "true"}, "the proxy in front"),
        ({**BEHIND, "OPEN_LOGIN": "true"}, "the proxy in front"),
        ({}, None),
        ({"OPEN_LOGIN": "true"}, None),  # loopback, no proxy: make run's own
        ({"HOST": "::1"}, None),
        ({"HOST": "127.0.0.2"}, None),
        ({"HOST": "0.0.0.0", **BEHIND, "USERS_FILE": "users.json"}, None),
    ],
)
def test_an_open_login_beyond_this_host_is_warned_of_at_start(tmp_path, env, reached):
    if "USERS_FILE" in env:
        env = {**env, "USERS_FILE": str(tmp_path / env["USERS_FILE"])}
    result = when_ready(tmp_path, env)
    assert result.returncode == 0, result.stderr
    loud = [line for line in result.stdout.splitlines() if "OPEN LOGIN" in line]
    assert len(loud) == (0 if reached is None else 1), result.stdout
    if reached is not None:
        assert loud[0] == (
            f"WARNING: OPEN LOGIN: OPEN_LOGIN=true and no USERS_FILE, so anyone who reaches"
            f" {reached} can get an admin token; set USERS_FILE unless a system in front"
            " authenticates every user"
        )


#: The line a listener beyond loopback stops gunicorn with, unless BEHIND_PROXY=true.
LISTENING_BEYOND_LOOPBACK = (
    "configuration error: listening on {listener}, beyond loopback, but gunicorn has no"
    " header timeout (a few clients that send their headers slowly stall it): put a proxy"
    " that reads the headers itself in front (nginx, an ingress) and set BEHIND_PROXY=true,"
    " or listen on loopback"
)


@pytest.mark.parametrize("bind", ["0.0.0.0:8080", "[::]:8080", "192.0.2.10:9000"])
def test_a_listener_beyond_loopback_given_beside_host_is_refused(tmp_path, bind):
    # HOST is loopback, so the settings pass; the bind came from GUNICORN_CMD_ARGS or systemd
    users = {"USERS_FILE": str(tmp_path / "users.json")}
    result = when_ready(tmp_path, {"WHEN_READY_BIND": bind, **users})
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        LISTENING_BEYOND_LOOPBACK.format(listener=f"http://{bind}")
    ]
    allowed = when_ready(tmp_path, {"WHEN_READY_BIND": bind, **users, **BEHIND})
    assert allowed.returncode == 0, allowed.stderr


def test_gunicorn_told_to_listen_beyond_loopback_stops_in_one_line(tmp_path):
    port = free_port()
    env = {
        "PATH": os.environ["PATH"],
        "INSTANCE_PATH": str(tmp_path / "instance"),
        "LOG_LEVEL": "WARNING",
        "GUNICORN_CMD_ARGS": f"-b 0.0.0.0:{port}",
    }
    result = subprocess.run(
        [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "-w", "1", "wsgi:app"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        LISTENING_BEYOND_LOOPBACK.format(listener=f"http://0.0.0.0:{port}")
    ]
    assert listening_addresses(port) == set()
    # on_exit ran: the master's folder of metric files is gone
    assert [path.name for path in (tmp_path / "instance").rglob("*") if path.is_dir()] == [
        MULTIPROCESS_FOLDER
    ]


@pytest.mark.parametrize(("proxies", "warned"), [("0.0.0.0/0", True), ("127.0.0.1/32,::1", False)])
def test_trusted_proxies_of_every_address_are_warned_of_at_start(tmp_path, proxies, warned):
    env = {"TRUSTED_PROXIES": proxies, "USERS_FILE": str(tmp_path / "users.json")}
    result = when_ready(tmp_path, env)
    assert result.returncode == 0, result.stderr
    everyone = [line for line in result.stdout.splitlines() if "trusts every address" in line]
    assert len(everyone) == (1 if warned else 0), result.stdout
