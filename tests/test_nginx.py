"""A real nginx, configured by deploy/nginx/token-service.conf, in front of gunicorn."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.conftest import ROOT, Gunicorn, free_port, require_tool, stop_process, wait_until

pytestmark = [pytest.mark.nginx, pytest.mark.gunicorn]

SITE = ROOT / "deploy" / "nginx" / "token-service.conf"
#: A loopback address other than 127.0.0.1, so the client is told apart from the proxy.
CLIENT_ADDRESS = "127.0.0.3"


@dataclass
class Proxy:
    url: str
    port: int
    access_log: Path
    backend: Gunicorn


def nginx_binary() -> str | None:
    return shutil.which("nginx", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def site_config(nginx_port: int, backend_port: int, access_log: Path) -> str:
    """Return the shipped site config with this test's ports and log file."""
    text = SITE.read_text()
    for old, new in [
        ("listen 80;", f"listen 127.0.0.1:{nginx_port};"),
        ("server 127.0.0.1:8080;", f"server 127.0.0.1:{backend_port};"),
        ("/var/log/nginx/token-service.access.log", str(access_log)),
    ]:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


@pytest.fixture
def proxy(gunicorn_server, tmp_path) -> Iterator[Proxy]:
    nginx = nginx_binary()
    require_tool(nginx is not None, "nginx", "apt-get install nginx")
    backend = gunicorn_server({"TRUSTED_PROXY_HOPS": "1", "LOG_LEVEL": "INFO"}, workers=2)
    port, prefix = free_port(), tmp_path / "nginx"
    prefix.mkdir()
    access_log = prefix / "access.log"
    (prefix / "site.conf").write_text(site_config(port, backend.port, access_log))
    temp_paths = "\n".join(
        f"{kind}_temp_path {prefix}/{kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    (prefix / "nginx.conf").write_text(
        f"daemon off;\nworker_processes 1;\npid {prefix}/nginx.pid;\n"
        f"error_log {prefix}/error.log warn;\nevents {{ worker_connections 128; }}\n"
        f"http {{\n{temp_paths}\naccess_log off;\ninclude {prefix}/site.conf;\n}}\n"
    )
    process = subprocess.Popen(
        [
            nginx,
            "-p",
            str(prefix),
            "-c",
            str(prefix / "nginx.conf"),
            "-e",
            str(prefix / "error.log"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError((prefix / "error.log").read_text())
        try:
            return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=3).ok
        except requests.RequestException:  # refused, or too slow on a loaded machine
            return False

    try:
        wait_until(ready, 15, "nginx")
        yield Proxy(f"http://127.0.0.1:{port}", port, access_log, backend)
    finally:
        stop_process(process)


def request_from(address: str, port: int, method: str, path: str, body=None, headers=None):
    """Send one request from a chosen loopback source address; return status, headers, body."""
    connection = http.client.HTTPConnection(
        "127.0.0.1", port, timeout=10, source_address=(address, 0)
    )
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def test_contract_holds_through_nginx(proxy):
    tokens = requests.post(f"{proxy.url}/login", data={"username": "alice"}, timeout=10).json()
    bearer = {"Authorization": f"Bearer {tokens['accessToken']}"}
    response = requests.get(f"{proxy.url}/user-accessible", headers=bearer, timeout=10)
    assert response.json()["user"]["username"] == "alice"
    response = requests.get(f"{proxy.url}/admin-accessible", headers=bearer, timeout=10)
    assert (response.status_code, response.json()) == (403, {"message": "No access"})
    response = requests.get(f"{proxy.url}/user-accessible", timeout=10)
    assert (response.status_code, response.text) == (401, "Unauthorized")
    assert response.headers["Content-Type"].startswith("text/plain")
    assert response.headers["WWW-Authenticate"] == "Bearer"
    body = {"username": "alice", "refreshToken": tokens["refreshToken"]}
    assert requests.post(f"{proxy.url}/token", json=body, timeout=10).status_code == 200
    response = requests.delete(f"{proxy.url}/token/{tokens['refreshToken']}", timeout=10)
    assert (response.status_code, response.content) == (204, b"")
    assert requests.post(f"{proxy.url}/token", json=body, timeout=10).status_code == 401


def request_log_line(server: Gunicorn, username: str) -> dict:
    """Return the request log's line of the login of ``username`` (waiting for it)."""

    def lines() -> list[dict]:
        return [
            json.loads(line)
            for line in server.log_path.read_text().splitlines()
            if line.startswith("{") and f'"user":"{username}"' in line
        ]

    wait_until(lines, 5, "request log line")
    return lines()[0]


def test_client_address_comes_from_the_proxy_not_from_the_client(proxy):
    headers = {"Content-Type": "application/json", "X-Forwarded-For": "203.0.113.66"}
    status, _, _ = request_from(
        CLIENT_ADDRESS, proxy.port, "POST", "/login", json.dumps({"username": "traced"}), headers
    )
    assert status == 200
    line = request_log_line(proxy.backend, "traced")
    assert line["client"] == CLIENT_ADDRESS  # nginx's view of the client, spoofed hop dropped


def test_forwarded_headers_are_ignored_without_a_trusted_proxy(gunicorn_server):
    server = gunicorn_server({"LOG_LEVEL": "INFO"}, workers=1)  # TRUSTED_PROXY_HOPS=0
    headers = {"Content-Type": "application/json", "X-Forwarded-For": "203.0.113.66"}
    status, _, _ = request_from(
        CLIENT_ADDRESS, server.port, "POST", "/login", json.dumps({"username": "direct"}), headers
    )
    assert status == 200
    assert request_log_line(server, "direct")["client"] == CLIENT_ADDRESS


def test_nginx_access_log_redacts_the_refresh_token(proxy):
    token = requests.post(f"{proxy.url}/login", json={"username": "a"}, timeout=10).json()
    requests.delete(f"{proxy.url}/token/{token['refreshToken']}?x=1", timeout=10)
    requests.get(f"{proxy.url}/healthz", timeout=10)  # nginx logs when a request ends
    wait_until(lambda: "/healthz" in proxy.access_log.read_text(), 5, "nginx access log")
    log = proxy.access_log.read_text()
    assert '"DELETE /token/<redacted>?x=1 HTTP/1.1" 204' in log
    assert token["refreshToken"] not in log


def test_metrics_are_not_served_through_the_proxy(proxy):
    response = requests.get(f"{proxy.url}/metrics", timeout=10)
    assert (response.status_code, response.json()) == (404, {"message": "not found"})
    direct = requests.get(f"{proxy.backend.url}/metrics", timeout=10)  # what Prometheus scrapes
    assert direct.status_code == 200
    assert "token_service_tokens_total" in direct.text


def test_oversized_body_is_the_services_json_413(proxy):
    response = requests.post(
        f"{proxy.url}/login",
        data="x" * 20_000,
        headers={"Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 413
    assert response.json() == {"message": "request body is larger than 16384 bytes"}


def test_gunicorn_down_is_a_json_503(proxy):
    proxy.backend.stop()
    response = requests.post(f"{proxy.url}/login", json={"username": "a"}, timeout=10)
    assert response.status_code == 503
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["Retry-After"] == "1"
    assert response.json() == {"message": "service unavailable, try again shortly"}
