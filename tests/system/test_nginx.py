"""A real nginx, configured by deploy/nginx/token-service.conf, in front of gunicorn."""

from __future__ import annotations

import http.client
import json
import random
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
import requests

from tests.helpers.nginx import SITE, nginx_binary, site_config
from tests.helpers.servers import Gunicorn, free_port, stop_process, wait_until
from tests.helpers.tools import require_tool

# The proxy and its limits do not depend on the token store: one backend is enough.
pytestmark = [pytest.mark.nginx, pytest.mark.gunicorn, pytest.mark.store("sqlite")]

#: The address nginx connects to gunicorn from: the one proxy the service trusts.
NGINX_ADDRESS = "127.0.0.1/32"
#: A loopback address other than 127.0.0.1, so the client is told apart from the proxy.
CLIENT_ADDRESS = "127.0.0.3"
#: Two more clients for the rate limit, which counts per client address.
EAGER_CLIENT, CALM_CLIENT = "127.0.0.4", "127.0.0.5"
JSON = {"Content-Type": "application/json"}
#: The bursts of /login and /token in the shipped config: requests beyond the steady rate
#: that nginx answers at once before it refuses.
BURSTS = re.findall(r"limit_req zone=token_service_auth burst=(\d+) nodelay;", SITE.read_text())
#: The burst of DELETE /token/<token>, a budget of its own.
REVOKE_BURSTS = re.findall(
    r"limit_req zone=token_service_revoke burst=(\d+) nodelay;", SITE.read_text()
)


@dataclass
class Proxy:
    url: str
    port: int
    access_log: Path
    backend: Gunicorn
    #: Where the backend's log stood when this proxy was ready: the lines past it are this
    #: proxy's requests, on a backend that other tests' proxies shared before it.
    log_start: int = 0


#: The backend of the shipped site config's tests. The app's own rate limit counts each
#: client behind nginx too (its tests are below); off here, so that nginx's limit is the one
#: these tests measure.
PROXIED = {
    "TRUSTED_PROXIES": NGINX_ADDRESS,
    "OPEN_LOGIN": "true",
    "LOG_LEVEL": "INFO",
    "RATE_LIMIT_AUTH": "off",
}


@pytest.fixture
def start_proxy(gunicorn_server, tmp_path) -> Iterator[Callable[..., Proxy]]:
    """Return a starter of nginx servers running the shipped site config; all stopped after."""
    nginx = nginx_binary()
    require_tool(nginx is not None, "nginx", "apt-get install nginx")
    started: list[subprocess.Popen] = []

    def start(
        backend: Gunicorn | None = None,
        metrics_network: str | None = None,
        with_gateway: bool = False,
    ) -> Proxy:
        if backend is None:
            backend = gunicorn_server(PROXIED, workers=2)
        port, prefix = free_port(), tmp_path / f"nginx-{len(started)}"
        prefix.mkdir()
        access_log = prefix / "access.log"
        site = site_config(port, backend.port, access_log, metrics_network)
        if with_gateway:  # the gateway's check in the service's own server, as for cookies
            include = (
                f"server_name _;\n    include {SITE.parent}/gateway-check.conf;\n"
                "    location /protected/ {\n        auth_request /_token_service/check;\n"
                f"        include {SITE.parent}/gateway-identity.conf;\n"
                "        proxy_pass http://token_service;\n    }"
            )
            site = site.replace("server_name _;", include, 1)
            zone = f"proxy_cache_path {prefix}/verdicts keys_zone=token_service_verdicts:1m;"
            site = f"{zone}\n{site}"
        (prefix / "site.conf").write_text(site)
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
        started.append(process)

        def ready() -> bool:
            if process.poll() is not None:
                raise RuntimeError((prefix / "error.log").read_text())
            try:
                return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=3).ok
            except requests.RequestException:  # refused, or too slow on a loaded machine
                return False

        wait_until(ready, 15, "nginx")
        log_start = backend.log_path.stat().st_size
        return Proxy(f"http://127.0.0.1:{port}", port, access_log, backend, log_start)

    yield start
    for process in started:
        stop_process(process)


@pytest.fixture
def proxy(start_proxy, shared_gunicorn) -> Proxy:
    """The shipped site config, as shipped but for addresses and paths, before gunicorn: a
    new nginx (its limits and logs its own), before the module's one gunicorn, which only
    answers; a test that stops its gunicorn starts its own with ``start_proxy()``."""
    return start_proxy(shared_gunicorn(PROXIED, workers=2))


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
    server = gunicorn_server({"LOG_LEVEL": "INFO"}, workers=1)  # no TRUSTED_PROXIES
    headers = {"Content-Type": "application/json", "X-Forwarded-For": "203.0.113.66"}
    status, _, _ = request_from(
        CLIENT_ADDRESS, server.port, "POST", "/login", json.dumps({"username": "direct"}), headers
    )
    assert status == 200
    assert request_log_line(server, "direct")["client"] == CLIENT_ADDRESS
    # a loopback peer forwarding: a proxy that is not trusted, warned of once per process
    request_from(CLIENT_ADDRESS, server.port, "GET", "/healthz", headers=headers)
    warnings = [
        line
        for line in server.log_path.read_text().splitlines()
        if "TRUSTED_PROXIES is empty" in line
    ]
    assert len(warnings) == 1
    assert json.loads(warnings[0])["level"] == "WARNING"


def test_nginx_access_log_redacts_the_refresh_token(proxy):
    token = requests.post(f"{proxy.url}/login", json={"username": "a"}, timeout=10).json()
    requests.delete(f"{proxy.url}/token/{token['refreshToken']}?x=1", timeout=10)
    requests.get(f"{proxy.url}/healthz", timeout=10)  # nginx logs when a request ends
    wait_until(lambda: "/healthz" in proxy.access_log.read_text(), 5, "nginx access log")
    log = proxy.access_log.read_text()
    assert '"DELETE /token/<redacted>?x=1 HTTP/1.1" 204' in log
    assert token["refreshToken"] not in log


#: Spellings of DELETE /token/T that reach the service's route (nginx passes the path as
#: sent, and the service decodes it), or that nginx refuses with the token in them.
TOKEN_PATHS = [
    "/%74oken/{}",
    "/%74%6F%6B%65%6E/{}",
    "//token/{}",
    "///token//{}",
    "/token/{}?x",
    "/x/../token/{}",
    "/./token/{}",
    "/TOKEN/{}",
    "/token;/{}",
    "/token%2F{}",
    "/token/{}/../../..",  # above the root: nginx's own 400
    "/token/{}%00",  # nginx's own 400
    "/token/{}%zz",  # a broken escape: nginx's own 400
]


def test_nginx_access_log_never_shows_a_token_in_any_spelling_of_its_path(proxy):
    tokens = {}
    for number, path in enumerate(TOKEN_PATHS):
        login = requests.post(f"{proxy.url}/login", json={"username": f"u{number}"}, timeout=10)
        token = login.json()["refreshToken"]
        tokens[path] = token
        status, _, _ = request_from("127.0.0.1", proxy.port, "DELETE", path.format(token))
        assert status in (204, 400, 404, 405), (path, status)
    request_from("127.0.0.1", proxy.port, "GET", "/healthz")
    wait_until(lambda: "/healthz" in proxy.access_log.read_text(), 5, "nginx access log")
    log = proxy.access_log.read_text()
    for path, token in tokens.items():
        assert token not in log, path
    assert '"DELETE /token/<redacted>?x HTTP/1.1" 204' in log
    assert '"DELETE <unparsed> HTTP/1.1" 400' in log


def test_metrics_from_an_allowed_address_are_the_services_counts(proxy):
    response = requests.get(f"{proxy.url}/metrics", timeout=10)  # from 127.0.0.1: allowed
    assert response.status_code == 200
    assert "token_service_tokens_total" in response.text


def test_oversized_body_is_the_services_json_413(proxy):
    response = requests.post(
        f"{proxy.url}/login",
        data="x" * 20_000,
        headers={"Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 413
    assert response.json() == {"message": "request body is larger than 16384 bytes"}


def test_gunicorn_down_is_a_json_503(start_proxy):
    proxy = start_proxy()
    proxy.backend.stop()
    response = requests.post(f"{proxy.url}/login", json={"username": "a"}, timeout=10)
    assert response.status_code == 503
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["Retry-After"] == "1"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.json() == {"message": "service unavailable, try again shortly"}


def test_the_access_log_redacts_a_token_in_a_path_the_gateway_refuses(start_proxy):
    proxy = start_proxy(with_gateway=True)
    login = requests.post(f"{proxy.url}/login", json={"username": "g"}, timeout=10)
    token = login.json()["refreshToken"]
    for path in ["/token/{};x", "/token/{}/../x", "/token%2F{}", "/x/../token/{}"]:
        status, _, body = request_from("127.0.0.1", proxy.port, "DELETE", path.format(token))
        assert (status, json.loads(body)) == (400, {"message": "ambiguous path"}), path
    assert request_from("127.0.0.1", proxy.port, "DELETE", f"/token/{token}")[0] == 204
    request_from("127.0.0.1", proxy.port, "GET", "/healthz")
    wait_until(lambda: "/healthz" in proxy.access_log.read_text(), 5, "nginx access log")
    log = proxy.access_log.read_text()
    assert token not in log
    assert log.count('"DELETE <unparsed> HTTP/1.1" 400') == 4
    assert '"DELETE /token/<redacted> HTTP/1.1" 204' in log


# --- rate limit of /login and /token ------------------------------------------------


def until_refused(
    address: str, port: int, method: str, path: str, body: dict | None = None
) -> tuple[list[int], tuple[int, dict[str, str], bytes]]:
    """Send requests back to back from ``address`` until one is a 429.

    Return the statuses before it, and the 429 itself. One kept-alive connection, and the
    path sent as it is written (requests would decode ``%6C``).
    """
    connection = http.client.HTTPConnection(
        "127.0.0.1", port, timeout=10, source_address=(address, 0)
    )
    headers = {"Content-Type": "application/json"}
    statuses: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while len(statuses) < 300 and time.monotonic() < deadline:
            connection.request(method, path, body=json.dumps(body or {}), headers=headers)
            response = connection.getresponse()
            answer = (response.status, dict(response.getheaders()), response.read())
            if response.status == 429:
                return statuses, answer
            statuses.append(response.status)
    finally:
        connection.close()
    pytest.fail(f"{path}: no 429 after {len(statuses)} requests: {statuses[-5:]}")


def assert_nginx_429(answer: tuple[int, dict[str, str], bytes]) -> None:
    status, headers, body = answer
    assert status == 429
    assert headers["Content-Type"] == "application/json"
    assert headers["Retry-After"] == "1"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert json.loads(body) == {"message": "too many requests"}


def access_log_count(proxy: Proxy, request_line: str) -> int:
    """Return how many requests ``METHOD /path`` gunicorn's request log shows."""
    method, path = request_line.split(" ", 1)
    count = 0
    for line in proxy.backend.log_path.read_bytes()[proxy.log_start :].decode().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:  # not a request-log line
            continue
        count += isinstance(entry, dict) and (entry.get("method"), entry.get("path")) == (
            method,
            path,
        )
    return count


def test_login_and_token_share_one_documented_burst():
    assert len(BURSTS) == 2
    assert BURSTS[0] == BURSTS[1]
    assert len(REVOKE_BURSTS) == 1
    assert REVOKE_BURSTS[0] == BURSTS[0]  # a budget of its own, the same numbers


def test_login_burst_is_refused_by_nginx_with_a_json_429_after_the_first_requests_pass(proxy):
    passed, refused = until_refused(
        EAGER_CLIENT, proxy.port, "POST", "/login", {"username": "eager"}
    )
    assert len(passed) > int(BURSTS[0])
    assert set(passed) == {200}
    assert_nginx_429(refused)
    # The refused request never reached gunicorn: it logged exactly the ones that passed.
    wait_until(lambda: access_log_count(proxy, "POST /login") >= len(passed), 5, "access log")
    time.sleep(0.2)
    assert access_log_count(proxy, "POST /login") == len(passed)


def test_paths_that_reach_login_are_rate_limited_too(proxy):
    # nginx matches the decoded, slash-merged path, as gunicorn routes it.
    for number, path in enumerate(["/%6Cogin", "//login", "/login?next=/"], 10):
        passed, refused = until_refused(f"127.0.0.{number}", proxy.port, "POST", path)
        assert len(passed) > int(BURSTS[0]), path
        assert set(passed) == {400}, path  # the service's own answer to an empty body
        assert_nginx_429(refused)


def test_token_burst_is_refused_by_nginx_for_that_client_only(proxy):
    status, _, body = request_from(
        CALM_CLIENT, proxy.port, "POST", "/login", json.dumps({"username": "bob"}), JSON
    )
    assert status == 200
    refresh = {"username": "bob", "refreshToken": json.loads(body)["refreshToken"]}
    passed, refused = until_refused(EAGER_CLIENT, proxy.port, "POST", "/token", refresh)
    assert len(passed) > int(BURSTS[0])
    assert set(passed) == {200}
    assert_nginx_429(refused)
    # The budget is per client address: another client still refreshes.
    status, _, body = request_from(
        CALM_CLIENT, proxy.port, "POST", "/token", json.dumps(refresh), JSON
    )
    assert status == 200
    assert "accessToken" in json.loads(body)


def test_other_paths_are_not_rate_limited(proxy):
    until_refused(EAGER_CLIENT, proxy.port, "POST", "/login", {"username": "eager"})
    assert request_from(EAGER_CLIENT, proxy.port, "GET", "/healthz")[0] == 200
    # a logout has a budget of its own: a client that spent its login budget still logs out
    assert request_from(EAGER_CLIENT, proxy.port, "DELETE", "/token/" + "x" * 42)[0] == 204
    status, _, body = request_from(EAGER_CLIENT, proxy.port, "GET", "/user-accessible")
    assert (status, body) == (401, b"Unauthorized")


def test_revocations_are_refused_by_nginx_after_their_burst_in_any_spelling(proxy):
    # nginx matches the decoded, normalised path, as gunicorn routes it.
    path, passed_in_all = "/token/" + "x" * 42, 0
    for number, spelling in enumerate(["/token/", "/%74oken/", "//token/"], 20):
        passed, refused = until_refused(
            f"127.0.0.{number}", proxy.port, "DELETE", spelling + "x" * 42
        )
        assert len(passed) > int(REVOKE_BURSTS[0]), spelling
        assert set(passed) == {204}, spelling
        assert_nginx_429(refused)
        passed_in_all += len(passed)

    # The refused requests never reached gunicorn: it logged exactly the ones that passed.
    def logged() -> int:  # the service logs the path as routed: //token/ for //token/
        paths = [f"{prefix}token/<redacted>" for prefix in ("/", "//")]
        return sum(access_log_count(proxy, f"DELETE {path}") for path in paths)

    wait_until(lambda: logged() >= passed_in_all, 5, "gunicorn access log")
    time.sleep(0.2)
    assert logged() == passed_in_all
    assert request_from("127.0.0.30", proxy.port, "DELETE", path)[0] == 204  # another client
    # nginx's error log writes a refused request's whole line: never with the token in it.
    assert "x" * 42 not in (proxy.access_log.parent / "error.log").read_text()


# --- /metrics for the internal network only -----------------------------------------


def metrics_logged(proxy: Proxy) -> int:
    """Return how many requests for the metrics path gunicorn has logged."""
    return sum("etrics" in line for line in proxy.backend.log_path.read_text().splitlines())


def test_metrics_reach_the_service_from_loopback_by_default(proxy):
    status, _, _ = request_from("127.0.0.2", proxy.port, "GET", "/metrics")
    assert status != 403
    wait_until(lambda: access_log_count(proxy, "GET /metrics") == 1, 5, "gunicorn access log")


def test_metrics_are_a_json_403_outside_the_allowed_network(start_proxy):
    proxy = start_proxy(metrics_network="127.0.0.1/32")
    # nginx matches the decoded, normalised path: every spelling of /metrics is refused.
    for path in [
        "/metrics",
        "/metrics/",
        "/metrics?x=1",
        "//metrics",
        "/%6Detrics",
        "/x/../metrics",
    ]:
        status, headers, body = request_from("127.0.0.2", proxy.port, "GET", path)
        assert (status, headers["Content-Type"]) == (403, "application/json"), path
        assert json.loads(body) == {"message": "forbidden"}
    # From the allowed network the request reaches gunicorn (whatever the service answers),
    # and it is the only request for the metrics path gunicorn ever saw.
    status, _, _ = request_from("127.0.0.1", proxy.port, "GET", "/metrics")
    assert status != 403
    wait_until(lambda: metrics_logged(proxy) >= 1, 5, "gunicorn access log")
    assert access_log_count(proxy, "GET /metrics") == 1
    assert metrics_logged(proxy) == 1


# --- keep-alive to gunicorn ---------------------------------------------------------


def connections_to(port: int) -> set[tuple[str, str]]:
    """Return the TCP connections (local, remote) of this host to or from ``port``."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, state = line.split()[1:4]
        ports = {int(local.split(":")[1], 16), int(remote.split(":")[1], 16)}
        if port in ports and state != "0A":  # 0A: LISTEN
            found.add((local, remote))
    return found


def test_nginx_keeps_connections_to_a_gthread_gunicorn_alive(start_proxy, gunicorn_server):
    backend = gunicorn_server(
        {
            "TRUSTED_PROXIES": NGINX_ADDRESS,
            "OPEN_LOGIN": "true",
            "GUNICORN_CMD_ARGS": "-k gthread --threads 2",
        },
        workers=1,
    )
    proxy = start_proxy(backend=backend)
    before = connections_to(backend.port)
    with requests.Session() as session:
        for _ in range(30):
            assert session.get(f"{proxy.url}/healthz", timeout=10).status_code == 200
    assert len(connections_to(backend.port) - before) <= 1  # 30 requests, at most one new


# --- forwarded headers: nginx's view of the client, counted by the app --------------

#: What a client sent in X-Forwarded-For to pass for the host or for someone else.
SPOOFS = [
    "127.0.0.1",
    "::ffff:127.0.0.1",
    "0:0:0:0:0:0:0:1",
    "127.255.1.2",
    "random",
    "not an address",
]
APP_LIMIT = 5


def test_a_client_on_nginxs_own_address_cannot_name_another_one(start_proxy, gunicorn_server):
    # nginx sends $remote_addr alone: a client list after a trusted address is never read
    backend = gunicorn_server(
        {"TRUSTED_PROXIES": NGINX_ADDRESS, "OPEN_LOGIN": "true", "LOG_LEVEL": "INFO"}, workers=1
    )
    proxy = start_proxy(backend=backend)
    headers = {**JSON, "X-Forwarded-For": "203.0.113.66"}
    body = json.dumps({"username": "local"})
    assert request_from("127.0.0.1", proxy.port, "POST", "/login", body, headers)[0] == 200
    assert request_log_line(backend, "local")["client"] == "127.0.0.1"


def spoof_value(spoof: str, number: int) -> str:
    if spoof == "random":
        return f"198.51.100.{random.randrange(1, 255)}"
    return f"{spoof} {number}" if spoof == "not an address" else spoof


def test_spoofs_through_nginx_are_ignored_and_each_client_is_counted_as_itself(
    start_proxy, gunicorn_server
):
    backend = gunicorn_server(
        {
            "TRUSTED_PROXIES": NGINX_ADDRESS,
            "OPEN_LOGIN": "true",
            "RATE_LIMIT_AUTH": f"{APP_LIMIT} per minute",  # RATE_LIMIT_EXEMPT: the default
            "LOG_LEVEL": "INFO",
        },
        workers=1,
    )
    proxy = start_proxy(backend=backend)
    clients = [f"127.0.0.{40 + number}" for number in range(len(SPOOFS))]
    body = json.dumps({"username": "alice", "refreshToken": "x" * 42})
    for client, spoof in zip(clients, SPOOFS, strict=True):
        answers = [
            request_from(
                client,
                proxy.port,
                "POST",
                "/token",
                body,
                {**JSON, "X-Forwarded-For": spoof_value(spoof, number)},
            )
            for number in range(APP_LIMIT + 1)
        ]
        assert [status for status, _, _ in answers] == [401] * APP_LIMIT + [429], spoof
        assert answers[-1][1]["Cache-Control"] == "no-store"  # the app's 429, not nginx's

    def logged() -> list[str]:
        lines = backend.log_path.read_text().splitlines()
        entries = [json.loads(line) for line in lines if line.startswith("{")]
        return [entry["client"] for entry in entries if entry.get("path") == "/token"]

    wait_until(lambda: len(logged()) == len(clients) * (APP_LIMIT + 1), 5, "request log")
    assert sorted(set(logged())) == sorted(clients)


@pytest.mark.parametrize("prefix_trusted", ["false", "true"])
def test_a_clients_forwarded_prefix_never_reaches_the_login_redirect(
    start_proxy, gunicorn_server, prefix_trusted
):
    # believed by the app or not, nginx clears the client's X-Forwarded-Prefix
    from tests.helpers.hostile_provider import CLIENT_ID, CLIENT_SECRET, HostileProvider

    provider = HostileProvider()
    try:
        backend = gunicorn_server(
            {
                "TRUSTED_PROXIES": NGINX_ADDRESS,
                "OPEN_LOGIN": "true",
                "TRUSTED_PROXY_PREFIX": prefix_trusted,
                "OIDC_PROVIDERS": "corp",
                "OIDC_CORP_ISSUER": provider.issuer,
                "OIDC_CORP_CLIENT_ID": CLIENT_ID,
                "OIDC_CORP_CLIENT_SECRET": CLIENT_SECRET,
            },
            workers=1,
        )
        proxy = start_proxy(backend=backend)
        headers = {
            "X-Forwarded-Prefix": "/evil",
            "X-Forwarded-Host": "evil.example",
            "X-Forwarded-Port": "666",
            "X-Forwarded-Proto": "https",
        }
        status, answer, _ = request_from(
            CLIENT_ADDRESS, proxy.port, "GET", "/auth/corp/login", headers=headers
        )
    finally:
        provider.stop()
    assert status == 302
    query = dict(parse_qsl(urlsplit(answer["Location"]).query))
    assert query["redirect_uri"] == f"{proxy.url}/auth/corp/callback"
