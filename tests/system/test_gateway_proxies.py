"""The issue's list through every proxy that runs here: a real nginx with
deploy/nginx/gateway-rules-example.conf and Debian's caddy with deploy/caddy/Caddyfile,
each in front of an upstream that echoes what it received, asking one real gunicorn of the
service that judges each request by an ACCESS_RULES_FILE (docs/gateway.md)."""

from __future__ import annotations

import json
import re
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import jwt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.auth.keys import load_key_ring
from app.auth.tokens import issue_cookie_token
from tests.helpers.caddy import CADDYFILE, start_caddy
from tests.helpers.echo_upstream import EchoUpstream, headers_of
from tests.helpers.gateway import (
    ACCESS_RULES,
    ADMIN_SPELLINGS,
    FORGED,
    SERVICE_401,
    SERVICE_403,
    admin_spellings,
    get,
    laxest_reading,
)
from tests.helpers.nginx import SNIPPETS, VERDICTS, start_gateway_nginx
from tests.helpers.servers import Gunicorn, base_environment, fresh
from tests.helpers.tokens import bearer
from tests.helpers.tools import ROOT, require_tool, which

pytestmark = [pytest.mark.nginx, pytest.mark.caddy, pytest.mark.gunicorn]

DEPLOY = ROOT / "deploy" / "nginx"
RULES_EXAMPLE = DEPLOY / "gateway-rules-example.conf"
#: The names deploy/nginx/gateway-identity.conf clears: the Caddyfile strips them too.
CLEARED = re.findall(
    r'^proxy_set_header (\S+) "";$', (DEPLOY / "gateway-identity.conf").read_text(), re.M
)
PROXIES = ["nginx", "caddy"]


class Proxy(Protocol):
    url: str

    def stop(self) -> None: ...


def nginx_rules_site(port: int, upstream_port: int, prefix: Path) -> str:
    """Return gateway-rules-example.conf with this test's ports and the snippets where they
    are in the checkout."""
    text = RULES_EXAMPLE.read_text()
    for old, new in [
        ("listen 8081;", f"listen 127.0.0.1:{port};"),
        ("server 127.0.0.1:9000;", f"server 127.0.0.1:{upstream_port};"),
    ]:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    assert text.count(f"include {SNIPPETS}") == 2
    text = text.replace(SNIPPETS, f"{DEPLOY}/")
    assert text.count(VERDICTS) == 1
    return text.replace(VERDICTS, str(prefix / "verdicts"))


def start_proxy(kind: str, folder: Path, service_port: int, upstream_port: int) -> Proxy:
    """Start the proxy ``kind`` with its shipped config, before the service and the upstream."""
    if kind == "caddy":
        return start_caddy(folder, service_port, upstream_port)

    def site(port: int) -> str:
        return nginx_rules_site(port, upstream_port, folder)

    return start_gateway_nginx(folder, service_port, site)


def rules_file(folder: Path) -> Path:
    rules = folder / "rules.toml"
    rules.write_text(ACCESS_RULES)
    return rules


@dataclass
class Service:
    server: Gunicorn
    secret: str

    def login(self, username: str) -> str:
        answer = fresh("POST", f"{self.server.url}/login", json={"username": username})
        return answer.json()["accessToken"]

    def mint(self, **claims: Any) -> str:
        now = int(time.time())
        full = {"username": "carol", "role": "user", "iat": now, "exp": now + 600, **claims}
        return load_key_ring(self.secret).current.sign(full)

    def cookie(self, user: dict[str, str]) -> str:
        return issue_cookie_token(user, load_key_ring(self.secret), 60)


@dataclass
class Gateway:
    kind: str
    url: str
    echo: EchoUpstream
    service: Service


@pytest.fixture(scope="module")
def echo() -> Iterator[EchoUpstream]:
    upstream = EchoUpstream()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def service(tmp_path_factory) -> Iterator[Service]:
    """One gunicorn of the service for both proxies: it judges by the rules above, believes
    the proxies (loopback), takes the cookie token too and lets nginx keep its verdicts."""
    folder = tmp_path_factory.mktemp("gateway-service")
    secret = secrets.token_urlsafe(48)
    env = {
        **base_environment(),
        "INSTANCE_PATH": str(folder / "instance"),
        "LOG_LEVEL": "INFO",
        "TRUSTED_PROXIES": "127.0.0.1/32",  # the proxies, which name the original request
        "OPEN_LOGIN": "true",
        "ACCESS_RULES_FILE": str(rules_file(folder)),
        "SIGNING_SECRET": secret,
        "AUTH_CHECK_COOKIE": "on",
        "AUTH_CHECK_CACHE_SECONDS": "30",
    }
    server = Gunicorn(env, 1, folder / "gunicorn.log").start()
    yield Service(server, secret)
    server.stop()


@pytest.fixture(scope="module", params=PROXIES)
def gateway(request, service, echo, tmp_path_factory) -> Iterator[Gateway]:
    """The proxy of the test's parameter with its shipped config, before the service."""
    folder = tmp_path_factory.mktemp(request.param) / request.param
    proxy = start_proxy(request.param, folder, service.server.port, echo.port)
    yield Gateway(request.param, proxy.url, echo, service)
    proxy.stop()


def passed(gateway: Gateway, path: str, headers: dict[str, str], **kwargs: Any) -> dict[str, Any]:
    """Send a request that must pass; return what the upstream received."""
    status, _, body = get(f"{gateway.url}{path}", headers, **kwargs)
    assert status == 200, (path, status, body)
    received = json.loads(body)
    assert received["path"] == path
    return received


def assert_refused(gateway: Gateway, path: str, answer, expected) -> None:
    status, headers, body = answer
    assert (status, headers["Content-Type"], body) == expected, path
    assert headers["Cache-Control"] == "no-store"
    if status == 401:
        assert headers.get_all("WWW-Authenticate") == ["Bearer"]
    assert path not in gateway.echo.paths()  # the upstream never saw it


# --- the answers ----------------------------------------------------------------------


def test_no_token_is_the_services_401_with_its_body_and_challenge(gateway):
    for path in ["/no-token", "/admin/no-token"]:
        assert_refused(gateway, path, get(f"{gateway.url}{path}"), SERVICE_401)
    path = "/bad-token"
    assert_refused(gateway, path, get(gateway.url + path, bearer("x.y.z")), SERVICE_401)


def test_a_user_on_an_admin_route_is_the_services_403(gateway):
    user = bearer(gateway.service.login("alice"))
    path = "/admin/user-token"
    assert_refused(gateway, path, get(gateway.url + path, user), SERVICE_403)
    path = "/reports-on-the-admin-host"  # a rule by host
    answer = get(gateway.url + path, {**user, "Host": "admin.example.com"})
    assert_refused(gateway, path, answer, SERVICE_403)
    path = "/reports/1"  # a rule by method: the proxy names it
    assert_refused(gateway, path, get(gateway.url + path, user, method="DELETE"), SERVICE_403)


def test_users_and_admins_reach_their_routes_and_the_upstream_sees_who(gateway):
    alice = gateway.service.login("alice")
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
    # Fields a Bearer token lacks send no header (Caddy 2.6 would copy its placeholder).
    for name in ["X-Auth-Request-Source", "X-Auth-Request-Name", "Remote-Name"]:
        assert headers_of(received, name) == [], name
    assert not any(value.startswith("{") for _, value in received["headers"])
    assert headers_of(received, "Authorization") == []  # the client's token stays here
    admin = bearer(gateway.service.login("admin"))
    for path, host in [("/admin/settings", "gateway"), ("/reports", "admin.example.com")]:
        received = passed(gateway, path, {**admin, "Host": host})
        assert headers_of(received, "X-Auth-Request-User") == ["admin"], path
        assert headers_of(received, "Remote-Groups") == ["admin"], path
    assert passed(gateway, "/reports/2", admin, method="DELETE")["method"] == "DELETE"


def test_a_public_route_passes_with_no_token_and_no_identity(gateway):
    received = passed(gateway, "/public/logo.svg", {})
    for name in ["X-Auth-Request-User", "X-Auth-Request-Groups", "Remote-User"]:
        assert headers_of(received, name) == [], name


def test_a_request_body_reaches_the_upstream_whole(gateway):
    headers = {
        **bearer(gateway.service.login("bob")),
        "Content-Type": "application/x-www-form-urlencoded",
    }
    received = passed(gateway, "/form", headers, method="POST", body=b"a=1&b=2")
    assert (received["method"], received["body"]) == ("POST", "a=1&b=2")


def spellings(name: str) -> list[str]:
    """Return ``name`` as written, in capitals, in lower case, and with its case swapped."""
    return [name, name.upper(), name.lower(), name.swapcase()]


def test_identity_headers_a_client_writes_never_reach_the_upstream(gateway):
    token = bearer(gateway.service.login("bob"))
    received = passed(gateway, "/spoofed", {**FORGED, **token})
    for text in ["mallory", "forged", "99999999999"]:
        assert text not in json.dumps(received), text
    assert headers_of(received, "X-Auth-Request-User") == ["bob"]
    assert headers_of(received, "Remote-Groups") == ["user"]
    assert len(CLEARED) > 40
    underscored = [
        "X_Auth_Request_User",
        "x_auth_request_groups",
        "X-Auth_Request-User",
        "Remote_User",
        "X_Forwarded_User",
    ]
    for index in range(4):
        forged = {spellings(name)[index]: f"mallory-{name}" for name in CLEARED + underscored}
        received = passed(gateway, f"/cleared-{index}", {**forged, **token})
        assert "mallory" not in json.dumps(received)
    path = "/spoofed-no-token"  # and without a token they open nothing
    assert_refused(gateway, path, get(gateway.url + path, FORGED), SERVICE_401)
    path = "/admin/spoofed"
    forged_admin = {**token, "X-Auth-Request-Groups": "admin", "Remote-Groups": "admin"}
    assert_refused(gateway, path, get(gateway.url + path, forged_admin), SERVICE_403)


def test_the_upstream_never_gets_the_clients_forwarded_host(gateway):
    token = bearer(gateway.service.login("nora"))
    headers = {**token, "X-Forwarded-Host": "admin.example.com"}
    received = passed(gateway, "/forwarded-host", headers)
    assert "admin.example.com" not in json.dumps(received)


def test_an_expired_token_is_401(gateway):
    path = "/expired"
    token = gateway.service.mint(exp=int(time.time()) - 1)
    assert_refused(gateway, path, get(gateway.url + path, bearer(token)), SERVICE_401)
    path = "/unknown-key"
    token = load_key_ring(secrets.token_urlsafe(48)).current.sign(
        {"username": "x", "role": "admin", "iat": int(time.time()), "exp": int(time.time()) + 60}
    )
    assert_refused(gateway, path, get(gateway.url + path, bearer(token)), SERVICE_401)
    assert passed(gateway, "/minted", bearer(gateway.service.mint()))


def test_the_cookie_token_passes_same_site_requests_and_the_proxy_names_the_method(gateway):
    cookie = {"Cookie": f"jwt={gateway.service.cookie({'source': 'corp', 'id': '2482'})}"}
    received = passed(gateway, "/browser", cookie)
    assert headers_of(received, "X-Auth-Request-User") == ["corp:2482"]
    assert headers_of(received, "X-Auth-Request-Source") == ["corp"]
    assert headers_of(received, "Remote-Name") == []  # no display name in this token
    path = "/browser-sibling-post"  # the check is a GET: the proxy names the POST
    sibling = {**cookie, "Sec-Fetch-Site": "same-site", "Origin": "https://other.example"}
    assert_refused(gateway, path, get(gateway.url + path, sibling, method="POST"), SERVICE_401)
    path = "/browser-sibling-post-named-get"  # the other proxy's names, written by the client
    named = {**sibling, "X-Original-Method": "GET", "X-Forwarded-Method": "GET"}
    assert_refused(gateway, path, get(gateway.url + path, named, method="POST"), SERVICE_401)
    assert passed(gateway, "/browser-sibling-get", sibling)


def checks_of(gateway: Gateway, user: str) -> int:
    """Return how many checks of ``user`` the service has answered."""
    lines = gateway.service.server.log_path.read_text().splitlines()
    entries = [json.loads(line) for line in lines if line[:1] == "{"]
    return sum((e.get("path"), e.get("user")) == ("/auth/check", user) for e in entries)


def test_a_kept_verdict_is_never_reused_for_a_request_another_rule_judges(gateway):
    # The service writes a request's line before it answers: once the proxy has answered,
    # the lines of the checks it asked for are in the log.
    username = f"kate-{gateway.kind}"
    user = bearer(gateway.service.login(username))
    for _ in range(3):
        passed(gateway, "/kept/x", user)
    # nginx keeps the pass (AUTH_CHECK_CACHE_SECONDS); Caddy keeps no verdicts.
    assert checks_of(gateway, username) == (1 if gateway.kind == "nginx" else 3)
    for path, headers, method in [
        ("/kept/x", user, "DELETE"),
        ("/kept/x", {**user, "Host": "admin.example.com"}, "GET"),
        ("/admin/kept", user, "GET"),
        ("/admin/kept", user, "GET"),
    ]:
        answer = get(gateway.url + path, headers, method=method)
        assert answer[0] == 403, (path, headers, method)
    assert passed(gateway, "/kept/x", user)


# --- the rule tricks ----------------------------------------------------------------


#: Detours through the public folder, which needs no token, to the admin pages.
PUBLIC_DETOURS = [
    "/public/../admin/panel",
    "/public/..;/admin/panel",
    "/public/%2e%2e/admin/panel",
    "/public%2f..%2fadmin/panel",
    "/public/..%5cadmin/panel",
    "/public/..\\admin/panel",
    "/PUBLIC/../ADMIN/panel",
    "/public//../../admin/panel",
    "/public/%252e%252e/admin/panel",
]


def assert_not_in_the_admin_area(gateway: Gateway, path: str, headers: dict[str, str]) -> None:
    """Send ``path`` as written: it never reaches the upstream's admin pages."""
    before = len(gateway.echo.seen)
    status, _, body = get(gateway.url + path, headers)
    reached = gateway.echo.seen[before:]
    if laxest_reading(path).startswith("/admin"):
        assert 400 <= status < 500, (path, status, body)
        assert reached == [], path
    else:  # a path that leads elsewhere may pass, judged by the rule of where it leads
        assert all(not laxest_reading(r["path"]).startswith("/admin") for r in reached), path


def test_no_spelling_of_an_admin_path_lets_a_user_through(gateway):
    user = bearer(gateway.service.mint())
    for path in ["/ADMIN/panel", "/x/..;/admin/panel", "/admin;/panel", *ADMIN_SPELLINGS]:
        assert_not_in_the_admin_area(gateway, path, user)


def test_no_detour_through_the_public_folder_opens_the_admin_pages(gateway):
    for path in PUBLIC_DETOURS:
        assert laxest_reading(path) == "/admin/panel", path
        assert_not_in_the_admin_area(gateway, path, {})
        assert_not_in_the_admin_area(gateway, path, bearer(gateway.service.mint()))


@settings(max_examples=100, deadline=None)
@given(path=admin_spellings(), lead=st.sampled_from(["", "/public/..", "/public/%2e%2e"]))
def test_a_user_never_reaches_the_admin_pages_by_any_spelling(gateway, path, lead):
    assert_not_in_the_admin_area(gateway, lead + path, bearer(gateway.service.mint()))


# --- the service stopped --------------------------------------------------------------


@pytest.mark.store("sqlite")
@pytest.mark.parametrize("kind", PROXIES)
def test_the_token_service_stopped_is_a_json_503_never_a_pass(
    kind, gunicorn_server, echo, tmp_path
):
    settings = {
        "TRUSTED_PROXIES": "127.0.0.1/32",
        "OPEN_LOGIN": "true",
        "ACCESS_RULES_FILE": str(rules_file(tmp_path)),
    }
    service = gunicorn_server(settings, workers=1)
    proxy = start_proxy(kind, tmp_path / kind, service.port, echo.port)
    try:
        token = fresh("POST", f"{service.url}/login", json={"username": "erin"}).json()
        user = bearer(token["accessToken"])
        assert get(f"{proxy.url}/before-stop-{kind}", user)[0] == 200
        service.stop()
        for path, headers in [("/stopped", user), ("/stopped-none", {}), ("/public/x", {})]:
            status, answer, body = get(proxy.url + path, headers)
            assert (status, answer["Content-Type"]) == (503, "application/json"), path
            assert json.loads(body) == {"message": "authentication unavailable, try again shortly"}
            assert answer["Retry-After"] == "1"
            assert answer["X-Content-Type-Options"] == "nosniff"
            assert answer["Cache-Control"] == "no-store"
            assert path not in echo.paths()
    finally:
        proxy.stop()


@pytest.mark.parametrize("kind", PROXIES)
def test_the_upstream_down_is_the_proxys_own_502_not_the_services_503(kind, service, tmp_path):
    with socket.socket() as held:  # bound, never listening: refused, and no one else's
        held.bind(("127.0.0.1", 0))
        proxy = start_proxy(kind, tmp_path / kind, service.server.port, held.getsockname()[1])
        try:
            status, _, body = get(f"{proxy.url}/reports", bearer(service.mint()))
            assert status == 502, body
            assert b"authentication unavailable" not in body
        finally:
            proxy.stop()


def test_the_shipped_caddyfile_adapts_as_written(tmp_path):
    binary = which("caddy")
    require_tool(binary is not None, "caddy", "apt-get install caddy")
    assert binary is not None
    env = {**base_environment(), "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path),
           "XDG_DATA_HOME": str(tmp_path)}  # fmt: skip
    command = [binary, "adapt", "--config", str(CADDYFILE), "--adapter", "caddyfile"]
    adapted = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)
    assert adapted.returncode == 0, adapted.stderr
    config = json.loads(adapted.stdout)
    (server,) = config["apps"]["http"]["servers"].values()
    assert "errors" in server  # the 503 of the check failing
    assert "/auth/check?" in adapted.stdout
