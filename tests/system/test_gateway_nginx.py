"""The shipped gateway: a real nginx with deploy/nginx/gateway-*.conf in front of an upstream
that echoes what it received, asking a real gunicorn of the service (docs/gateway.md)."""

from __future__ import annotations

import http.client
import json
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import jwt
import pytest
from hypothesis import given, settings

from app.auth.keys import load_key_ring
from app.auth.tokens import issue_cookie_token
from tests.helpers.echo_upstream import EchoUpstream, headers_of
from tests.helpers.gateway import (
    ADMIN_SPELLINGS,
    FORGED,
    SERVICE_401,
    SERVICE_403,
    admin_spellings,
    get,
)
from tests.helpers.nginx import SNIPPETS, VERDICTS, Nginx, start_gateway_nginx
from tests.helpers.servers import Gunicorn, fresh, wait_until
from tests.helpers.tokens import bearer
from tests.helpers.tools import ROOT

pytestmark = [pytest.mark.nginx, pytest.mark.gunicorn]

DEPLOY = ROOT / "deploy" / "nginx"
EXAMPLE = DEPLOY / "gateway-example.conf"
#: Locations only the tests add, each a mistake an operator could make with the snippets.
MISTAKES = f"""
    location /typo/ {{
        auth_request /_token_service/check-admn;
        include {DEPLOY}/gateway-identity.conf;
        proxy_pass http://protected_app;
    }}
    location = /_token_service/check-superuser {{
        internal;
        proxy_pass http://token_service/auth/check?role=superuser;
    }}
    location /superusers/ {{
        auth_request /_token_service/check-superuser;
        include {DEPLOY}/gateway-identity.conf;
        proxy_pass http://protected_app;
    }}
"""
IDENTITY = DEPLOY / "gateway-identity.conf"
#: The names gateway-identity.conf clears: never passed on, whoever sends them.
CLEARED = re.findall(r'^proxy_set_header (\S+) "";$', IDENTITY.read_text(), re.M)


# --- nginx with the shipped snippets ------------------------------------------------


def gateway_site(port: int, upstream_port: int, prefix: Path) -> str:
    """Return gateway-example.conf with this test's ports, the snippets where they are in the
    checkout, and the test's mistaken locations."""
    text = EXAMPLE.read_text()
    for old, new in [
        ("listen 8081;", f"listen 127.0.0.1:{port};"),
        ("server 127.0.0.1:9000;", f"server 127.0.0.1:{upstream_port};"),
    ]:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    assert text.count(f"include {SNIPPETS}") == 3
    text = text.replace(SNIPPETS, f"{DEPLOY}/")
    assert text.count(VERDICTS) == 1
    text = text.replace(VERDICTS, str(prefix / "verdicts"))
    return text[: text.rindex("}")] + MISTAKES + listed_headers_location() + "}\n"


def listed_headers_location() -> str:
    """Return docs/gateway.md's location that passes only the headers it lists, at /listed/."""
    page = (ROOT / "docs" / "gateway.md").read_text()
    name = "gateway-listed-headers"
    match = re.search(
        rf"<!-- {name}:start -->\n```nginx\n(.*?)```\n<!-- {name}:end -->", page, re.S
    )
    assert match, f"no {name} block"
    text = match.group(1)
    for old, new in [
        ("location /reports/", "location /listed/"),
        (SNIPPETS, f"{DEPLOY}/"),
        ("http://reports;", "http://protected_app;"),
    ]:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def start_nginx(prefix: Path, service_port: int, upstream_port: int, http: str = "") -> Nginx:
    """Start nginx with token-service.conf (its upstream), the gateway example, and the
    directives ``http`` at the http level."""
    return start_gateway_nginx(
        prefix, service_port, lambda port: gateway_site(port, upstream_port, prefix), http
    )


def service_environment(instance: Path, **settings: str) -> dict[str, str]:
    return {
        **{key: value for key, value in os.environ.items() if key in {"PATH", "HOME"}},
        "INSTANCE_PATH": str(instance),
        "LOG_LEVEL": "INFO",
        "TRUSTED_PROXIES": "127.0.0.1/32",
        "OPEN_LOGIN": "true",
        **settings,
    }


@dataclass
class Gateway:
    url: str
    echo: EchoUpstream
    service: Gunicorn
    secret: str
    previous_secret: str

    def login(self, username: str) -> str:
        answer = fresh("POST", f"{self.service.url}/login", json={"username": username})
        return answer.json()["accessToken"]

    def mint(self, secret: str, **claims: Any) -> str:
        now = int(time.time())
        full = {"username": "carol", "role": "user", "iat": now, "exp": now + 60, **claims}
        return load_key_ring(secret).current.sign(full)

    def cookie(self, user: dict[str, str]) -> str:
        return issue_cookie_token(user, load_key_ring(self.secret), 60)


@pytest.fixture(scope="module")
def echo() -> Iterator[EchoUpstream]:
    upstream = EchoUpstream()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def gateway(echo, tmp_path_factory) -> Iterator[Gateway]:
    """nginx with the shipped snippets, before a gunicorn of the service that signs with a
    new secret and still verifies the previous one's tokens (a rotation under way), lets
    nginx keep its verdicts and takes the cookie token too."""
    folder = tmp_path_factory.mktemp("gateway")
    secret, previous = secrets.token_urlsafe(48), secrets.token_urlsafe(48)
    env = service_environment(
        folder / "instance",
        SIGNING_SECRET=secret,
        SIGNING_SECRET_PREVIOUS=previous,
        AUTH_CHECK_COOKIE="on",
        AUTH_CHECK_CACHE_SECONDS="30",
    )
    service = Gunicorn(env, 1, folder / "gunicorn.log").start()
    try:
        nginx = start_nginx(folder / "nginx", service.port, echo.port)
        try:
            yield Gateway(nginx.url, echo, service, secret, previous)
        finally:
            nginx.stop()
    finally:
        service.stop()


def passed(gateway: Gateway, path: str, headers: dict[str, str]) -> dict[str, Any]:
    """Send a request that must pass; return what the upstream received."""
    status, _, body = get(f"{gateway.url}{path}", headers)
    assert status == 200, body
    received = json.loads(body)
    assert received["path"] == path
    return received


def assert_refused(gateway: Gateway, path: str, answer, expected) -> None:
    status, headers, body = answer
    assert (status, headers["Content-Type"], body) == expected
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Cache-Control"] == "no-store"
    if status == 401:
        assert headers.get_all("WWW-Authenticate") == ["Bearer"]
    assert path not in gateway.echo.paths()  # the upstream never saw it


# --- the answers ----------------------------------------------------------------------


def test_no_token_is_the_services_401_with_its_challenge(gateway):
    for path in ["/no-token", "/admin/no-token"]:
        assert_refused(gateway, path, get(f"{gateway.url}{path}"), SERVICE_401)
    path = "/bad-token"
    assert_refused(gateway, path, get(gateway.url + path, bearer("x.y.z")), SERVICE_401)


def test_a_users_token_on_the_admin_location_is_the_services_403(gateway):
    path = "/admin/user-token"
    answer = get(gateway.url + path, bearer(gateway.login("alice")))
    assert_refused(gateway, path, answer, SERVICE_403)


def test_users_and_admins_reach_their_locations_and_the_upstream_sees_who(gateway):
    alice = gateway.login("alice")
    received = passed(gateway, "/reports?q=1", bearer(alice))
    exp = str(jwt.decode(alice, options={"verify_signature": False})["exp"])
    for name, value in [
        ("X-Auth-Request-User", "alice"),
        ("X-Auth-Request-Groups", "user"),
        ("X-Auth-Request-Expires", exp),
        ("Remote-User", "alice"),  # Authelia's names, the same values
        ("Remote-Groups", "user"),
    ]:
        assert headers_of(received, name) == [value], name
    for name in ["X-Auth-Request-Source", "X-Auth-Request-Name", "Remote-Name"]:
        assert headers_of(received, name) == [], name
    admin = gateway.login("admin")
    received = passed(gateway, "/admin/settings", bearer(admin))
    assert headers_of(received, "X-Auth-Request-User") == ["admin"]
    assert headers_of(received, "Remote-Groups") == ["admin"]
    assert passed(gateway, "/as-admin", bearer(admin))["method"] == "GET"  # admin passes user


def test_identity_headers_a_client_writes_never_reach_the_upstream(gateway):
    received = passed(gateway, "/spoofed", {**FORGED, **bearer(gateway.login("bob"))})
    assert "mallory" not in json.dumps(received)
    assert "forged" not in json.dumps(received)
    assert "99999999999" not in json.dumps(received)
    for name in FORGED:
        assert len(headers_of(received, name)) <= 1, name  # the check's value, or none
    assert headers_of(received, "X-Auth-Request-User") == ["bob"]
    assert headers_of(received, "X-Auth-Request-Groups") == ["user"]
    assert headers_of(received, "Remote-Groups") == ["user"]
    path = "/spoofed-no-token"  # and without a token they open nothing
    assert_refused(gateway, path, get(gateway.url + path, FORGED), SERVICE_401)


def assert_never_reached(gateway: Gateway, path: str, headers: dict[str, str]) -> None:
    """Send ``path`` as written: a refusal, and nothing reached the upstream."""
    before = len(gateway.echo.seen)
    status, answer, body = get(gateway.url + path, headers)
    assert status in (400, 403, 404), (path, status, body)
    assert len(gateway.echo.seen) == before, path
    if status == 400 and answer["Content-Type"] == "application/json":
        assert json.loads(body) == {"message": "ambiguous path"}
        assert answer["X-Content-Type-Options"] == "nosniff"


def test_no_spelling_of_the_admin_location_lets_a_user_through(gateway):
    user = bearer(gateway.mint(gateway.secret, exp=int(time.time()) + 600))
    for path in ADMIN_SPELLINGS:
        assert_never_reached(gateway, path, user)
    status, answer, body = get(gateway.url + "/admin;/panel", user)
    assert (status, answer["Content-Type"]) == (400, "application/json")
    assert json.loads(body) == {"message": "ambiguous path"}
    assert answer["X-Content-Type-Options"] == "nosniff"


def test_admins_reach_the_admin_location_in_any_case_but_never_by_an_ambiguous_path(gateway):
    admin = bearer(gateway.login("admin"))
    for path in ["/ADMIN/panel", "/Admin", "/admin.json", "/%61dmin/panel?q=/../;%2e"]:
        received = passed(gateway, path, admin)
        assert headers_of(received, "X-Auth-Request-Groups") == ["admin"], path
    for path in ["/admin;/panel", "/x/../admin/panel", "/admin%2Fpanel", "/x/..%5Cadmin"]:
        assert_never_reached(gateway, path, admin)  # refused for everyone, before the check


def test_ordinary_paths_still_pass_for_users(gateway):
    user = bearer(gateway.login("ivan"))
    for path in [
        "/reports/2024.csv",
        "/.well-known/thing",
        "/a..b/c.",
        "/files/%C3%A9t%C3%A9%20x",
        "/search?q=/../admin;x%2e%2F",
        "/padmin/x",
    ]:
        assert headers_of(passed(gateway, path, user), "X-Auth-Request-Groups") == ["user"]


@settings(max_examples=200, deadline=None)
@given(path=admin_spellings())
def test_a_user_never_reaches_the_upstream_by_any_spelling_of_admin(gateway, path):
    user = bearer(gateway.mint(gateway.secret, exp=int(time.time()) + 600))
    assert_never_reached(gateway, path, user)


def spellings(name: str) -> list[str]:
    """Return ``name`` as written, in capitals, in lower case, and with its case swapped."""
    return [name, name.upper(), name.lower(), name.swapcase()]


def test_every_cleared_identity_header_is_dropped_in_any_case_and_documented(gateway):
    page = (ROOT / "docs" / "gateway.md").read_text()
    assert len(CLEARED) > 40
    for name in CLEARED:
        assert f"`{name}`" in page, name  # the documented list is the config's
    token = bearer(gateway.login("judy"))
    for index in range(4):
        forged = {spellings(name)[index]: f"mallory-{name}" for name in CLEARED}
        received = passed(gateway, f"/cleared-{index}", {**forged, **token})
        assert "mallory" not in json.dumps(received)
        for name in CLEARED:
            assert headers_of(received, name) == [], name


def raw_request(gateway: Gateway, head: bytes) -> tuple[int, bytes]:
    """Send a request head exactly as written; return the status and the body."""
    port = int(gateway.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(head)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def test_identity_header_names_nginx_would_not_parse_never_reach_the_upstream(gateway):
    token = gateway.login("mike").encode()
    for name in [
        b"X-Auth-Request-User ",
        b"X-Auth-Request-User\t",
        b" X-Auth-Request-User",
        b"X_AUTH_REQUEST_GROUPS",
        b"X-Auth-Request-User\x00",
        b"X-Auth-Request-Us\xe9r",
    ]:
        head = (
            b"GET /raw-header HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n"
            b"Authorization: Bearer " + token + b"\r\n" + name + b": mallory\r\n\r\n"
        )
        status, body = raw_request(gateway, head)
        assert status in (200, 400), name
        assert b"mallory" not in body, name
        if status == 200:
            assert headers_of(json.loads(body), "X-Auth-Request-User") == ["mike"], name


def test_the_upstream_routes_by_the_path_and_host_judged_never_the_clients_names(gateway):
    token = bearer(gateway.login("nora"))
    routing = {
        "X-Original-URL": "/admin/panel",
        "X-Rewrite-URL": "/admin/panel",
        "X-Forwarded-Host": "admin.example.com",
    }
    received = passed(gateway, "/routed-elsewhere", {**routing, **token})
    assert headers_of(received, "X-Original-URL") == []
    assert headers_of(received, "X-Rewrite-URL") == []
    assert headers_of(received, "X-Forwarded-Host") == ["127.0.0.1"]  # nginx's $host


def get_with_repeated_headers(url: str, path: str, headers: list[tuple[str, str]]):
    """Send a GET of ``path`` with ``headers`` as listed, a name twice if listed twice."""
    connection = http.client.HTTPConnection(url.removeprefix("http://"), timeout=10)
    try:
        connection.putrequest("GET", path)
        for name, value in headers:
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_a_method_override_sent_twice_reaches_the_upstream_as_the_one_value_judged(gateway):
    # nginx 1.22 keys the verdict cache on the first of two same-named headers (1.23 on,
    # on both joined): the upstream and the check get that one value, never the second
    token = gateway.login("oscar")
    for name in ("X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"):
        for _ in range(2):  # the second from the cache
            headers = [("Authorization", f"Bearer {token}"), (name, "GET"), (name, "DELETE")]
            status, body = get_with_repeated_headers(gateway.url, "/override-twice", headers)
            assert status == 200, body
            assert headers_of(json.loads(body), name) in (["GET"], ["GET, DELETE"]), name


def test_the_upstream_gets_no_token_of_the_client(gateway):
    for path, username in [("/no-token-passed", "kate"), ("/admin/no-token-passed", "admin")]:
        headers = {**bearer(gateway.login(username)), "Cookie": "theme=dark"}
        received = passed(gateway, path, headers)
        assert headers_of(received, "Authorization") == [], path
        assert headers_of(received, "Cookie") == ["theme=dark"], path  # other headers pass


def test_a_header_not_listed_passes_unless_the_location_lists_what_it_passes(gateway):
    headers = {
        **bearer(gateway.login("leo")),
        "X-Auth-Request-Anything-Else": "mallory",
        "Accept": "application/json",
    }
    received = passed(gateway, "/unlisted", headers)
    assert headers_of(received, "X-Auth-Request-Anything-Else") == ["mallory"]  # documented
    received = passed(gateway, "/listed/x", headers)
    assert "mallory" not in json.dumps(received)
    assert headers_of(received, "Authorization") == []
    assert headers_of(received, "Accept") == ["application/json"]
    assert headers_of(received, "X-Auth-Request-User") == ["leo"]
    form = {**headers, "Content-Type": "application/x-www-form-urlencoded"}
    status, _, body = get(f"{gateway.url}/listed/post", form, method="POST", body=b"a=1&b=2")
    received = json.loads(body)
    assert (status, received["method"], received["body"]) == (200, "POST", "a=1&b=2")
    assert headers_of(received, "Content-Type") == ["application/x-www-form-urlencoded"]


def test_an_expired_token_is_401(gateway):
    path = "/expired"
    token = gateway.mint(gateway.secret, exp=int(time.time()) - 1)
    assert_refused(gateway, path, get(gateway.url + path, bearer(token)), SERVICE_401)
    assert passed(gateway, "/minted", bearer(gateway.mint(gateway.secret)))


def test_a_token_of_the_previous_key_passes_until_it_expires(gateway):
    token = gateway.mint(gateway.previous_secret, username="dave")
    received = passed(gateway, "/previous-key", bearer(token))
    assert headers_of(received, "X-Auth-Request-User") == ["dave"]
    path = "/previous-key-expired"
    token = gateway.mint(gateway.previous_secret, exp=int(time.time()) - 1)
    assert_refused(gateway, path, get(gateway.url + path, bearer(token)), SERVICE_401)
    path = "/unknown-key"
    token = gateway.mint(secrets.token_urlsafe(48))
    assert_refused(gateway, path, get(gateway.url + path, bearer(token)), SERVICE_401)


def test_a_non_ascii_username_reaches_the_upstream_percent_encoded(gateway):
    received = passed(gateway, "/non-ascii", bearer(gateway.login("Zoë 🦊")))
    (value,) = headers_of(received, "X-Auth-Request-User")
    assert value == "Zo%C3%AB%20%F0%9F%A6%8A"
    assert unquote(value) == "Zoë 🦊"


def test_the_cookie_token_passes_same_site_requests_when_enabled(gateway):
    user = {"source": "corp", "id": "248289761001", "shownName": "Jane\r\nRemote-Groups: admin"}
    cookie = {"Cookie": f"jwt={gateway.cookie(user)}"}
    received = passed(gateway, "/browser", cookie)
    assert headers_of(received, "X-Auth-Request-User") == ["corp:248289761001"]
    assert headers_of(received, "Remote-User") == ["corp:248289761001"]  # Authelia's name
    assert headers_of(received, "X-Auth-Request-Source") == ["corp"]
    assert headers_of(received, "X-Auth-Request-Name") == ["Jane%0D%0ARemote-Groups%3A%20admin"]
    assert headers_of(received, "Remote-Groups") == ["user"]
    same_origin = {**cookie, "Sec-Fetch-Site": "same-origin"}
    status, _, body = get(f"{gateway.url}/browser-post", same_origin, method="POST")
    assert (status, json.loads(body)["method"]) == (200, "POST")
    path = "/admin/browser"
    assert_refused(gateway, path, get(gateway.url + path, cookie), SERVICE_403)
    path = "/browser-cross-site"
    answer = get(gateway.url + path, {**cookie, "Sec-Fetch-Site": "cross-site"})
    assert_refused(gateway, path, answer, SERVICE_401)
    path = "/browser-sibling-post"  # nginx names the client's method to the check
    sibling = {**cookie, "Sec-Fetch-Site": "same-site", "Origin": "https://other.example"}
    assert_refused(gateway, path, get(gateway.url + path, sibling, method="POST"), SERVICE_401)
    assert passed(gateway, "/browser-sibling-get", sibling)  # a GET from a sibling host


def test_a_mistake_in_the_nginx_config_is_a_json_500_never_a_pass(gateway):
    admin = bearer(gateway.login("admin"))
    for path in ["/typo/x", "/superusers/x"]:
        status, headers, body = get(gateway.url + path, admin)
        assert (status, headers["Content-Type"]) == (500, "application/json"), path
        assert json.loads(body) == {"message": "gateway misconfigured"}
        assert path not in gateway.echo.paths()

    def warned() -> bool:
        return "unknown query 'role=superuser'" in gateway.service.log_path.read_text()

    wait_until(warned, 5, "the service's warning")


def test_the_check_locations_are_not_for_clients(gateway):
    admin = bearer(gateway.login("admin"))
    for path in ["/_token_service/check", "/_token_service/check-admin", "/_token_service/x"]:
        assert get(gateway.url + path, admin)[0] == 404, path


def checks_of(gateway: Gateway, user: str) -> int:
    """Return how many checks of ``user`` the service has answered."""
    lines = gateway.service.log_path.read_text().splitlines()
    entries = [json.loads(line) for line in lines if line[:1] == "{"]
    return sum((e.get("path"), e.get("user")) == ("/auth/check", user) for e in entries)


def test_nginx_keeps_a_pass_and_asks_again_for_refusals_and_cookies(gateway):
    # The service writes a request's line before it answers: once nginx has answered, the
    # lines of the checks it asked for are in the log.
    frank = bearer(gateway.login("frank"))
    for _ in range(3):
        assert get(f"{gateway.url}/kept", frank)[0] == 200
    assert checks_of(gateway, "frank") == 1
    for _ in range(3):  # another location, another role: a verdict of its own, a 403
        assert get(f"{gateway.url}/admin/kept", frank)[0] == 403
    assert checks_of(gateway, "frank") == 4
    cookie = {"Cookie": f"jwt={gateway.cookie({'id': 'grace'})}"}
    for _ in range(2):
        assert get(f"{gateway.url}/kept-cookie", cookie)[0] == 200
    assert checks_of(gateway, "grace") == 2


@dataclass
class CheckStub:
    """A stand-in for the service's check: 200 with the X-Accel-Expires a test names."""

    kept_until: dict[str, str] = field(default_factory=dict)  # token -> X-Accel-Expires
    asked: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        stub = self

        class Handler(BaseHTTPRequestHandler):  # HTTP/1.0: no connection outlives stop()
            def do_GET(self) -> None:
                token = self.headers.get("Authorization", "").removeprefix("Bearer ")
                stub.asked.append(token)
                self.send_response(200)
                self.send_header("X-Auth-Request-User", token)
                self.send_header("X-Auth-Request-Groups", "user")
                self.send_header("Cache-Control", "no-store")
                if stub.kept_until.get(token):
                    self.send_header("X-Accel-Expires", stub.kept_until[token])
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


#: Cache settings a server may have for its own locations, which must not reach the check's.
LAX_CACHING = "proxy_cache_valid any 10m;\nproxy_cache_use_stale error timeout updating http_502;"


def test_nginx_keeps_a_verdict_only_until_the_second_the_check_names(echo, tmp_path):
    stub = CheckStub()
    nginx = start_nginx(tmp_path / "nginx", stub.server.server_address[1], echo.port, LAX_CACHING)
    now = int(time.time())
    stub.kept_until = {
        "ahead": f"@{now + 30}",
        "passed": f"@{now - 1}",  # the token's exp - 1 has passed: it expired
        "zero": "0",
        "none": "",  # no X-Accel-Expires: the snippets keep nothing of their own accord
    }
    try:
        for token in stub.kept_until:
            for _ in range(3):
                status, _, body = get(f"{nginx.url}/cache-{token}", bearer(token))
                assert status == 200, token
                assert headers_of(json.loads(body), "X-Auth-Request-User") == [token]
        assert {token: stub.asked.count(token) for token in stub.kept_until} == {
            "ahead": 1,
            "passed": 3,
            "zero": 3,
            "none": 3,
        }
        stub.stop()  # the check gone: a kept verdict still passes, a stale one never
        assert get(f"{nginx.url}/cache-ahead", bearer("ahead"))[0] == 200
        # a verdict is kept for its request (method, overrides, host, URI), never another's
        assert get(f"{nginx.url}/cache-ahead-down", bearer("ahead"))[0] == 503
        for token in ["passed", "zero", "none"]:
            assert get(f"{nginx.url}/cache-{token}", bearer(token))[0] == 503, token
    finally:
        nginx.stop()
        stub.stop()


@pytest.mark.store("sqlite")
def test_the_token_service_stopped_is_a_json_503_never_a_pass(gunicorn_server, echo, tmp_path):
    service = gunicorn_server({"TRUSTED_PROXIES": "127.0.0.1/32", "OPEN_LOGIN": "true"}, workers=1)
    nginx = start_nginx(tmp_path / "nginx", service.port, echo.port)
    try:
        token = fresh("POST", f"{service.url}/login", json={"username": "erin"}).json()
        assert get(f"{nginx.url}/before-stop", bearer(token["accessToken"]))[0] == 200
        service.stop()
        for path, headers in [("/stopped", bearer(token["accessToken"])), ("/stopped-none", {})]:
            status, answer, body = get(nginx.url + path, headers)
            assert (status, answer["Content-Type"]) == (503, "application/json")
            assert json.loads(body) == {"message": "authentication unavailable, try again shortly"}
            assert answer["Retry-After"] == "1"
            assert answer["X-Content-Type-Options"] == "nosniff"
            assert path not in echo.paths()
    finally:
        nginx.stop()
