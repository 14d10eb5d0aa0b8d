"""Traefik and Envoy, which are not packaged for this machine, checked at the protocol level:
the shipped configs parse and name the service's paths and headers, and a real gunicorn of
the service answers requests shaped exactly as each proxy's documentation and source say it
sends them (method, path, every header), from a trusted peer and from another.

- Traefik v3.7 (doc.traefik.io/traefik/v3.7, middlewares/http/forwardauth and errors;
  pkg/middlewares/auth/forward.go, writeHeader with trustForwardHeader set): a GET of the
  configured address, the client's headers but the hop-by-hop ones, its X-Forwarded-*
  replaced by Traefik's own (For, Method, Proto, Port, Host, Uri), no body; any 2xx passes.
- Envoy v3 API (envoyproxy.io/docs/envoy/latest, extensions.filters.http.ext_authz.v3;
  source/extensions/filters/common/ext_authz/ext_authz_http_impl.cc): the original method,
  path_prefix then the original path and query, the original Host, Authorization,
  Content-Length 0 and the allowed headers, no body; only a 200 passes.
"""

from __future__ import annotations

import http.client
import json
import re
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from hypothesis import given, settings

from app.auth.keys import load_key_ring
from app.auth.tokens import issue_cookie_token
from app.views.gateway import ENVOY_PREFIX, METHOD_OVERRIDES
from tests.helpers.gateway import (
    ACCESS_RULES,
    ADMIN_SPELLINGS,
    SERVICE_401,
    SERVICE_403,
    admin_spellings,
    laxest_reading,
)
from tests.helpers.servers import Gunicorn, base_environment
from tests.helpers.tools import ROOT

pytestmark = [pytest.mark.gunicorn]

TRAEFIK = ROOT / "deploy" / "traefik" / "token-service.yml"
ENVOY = ROOT / "deploy" / "envoy" / "envoy.yaml"
#: The headers of the check's 200, which each proxy copies onto the upstream's request.
IDENTITY = [
    "X-Auth-Request-User",
    "X-Auth-Request-Groups",
    "X-Auth-Request-Expires",
    "X-Auth-Request-Source",
    "X-Auth-Request-Name",
    "X-Auth-Request-Email",  # a third-party user's verified email
]
#: What each proxy must remove of a client's: the check's names, Authelia's, and the names
#: deploy/nginx/gateway-identity.conf clears.
STRIPPED = [
    *IDENTITY,
    "Remote-User",
    "Remote-Groups",
    "Remote-Name",
    "Remote-Email",
    *re.findall(
        r'^proxy_set_header (\S+) "";$',
        (ROOT / "deploy" / "nginx" / "gateway-identity.conf").read_text(),
        re.M,
    ),
]
#: The original request's host, as each proxy names it.
HOST = "app.example.com"


# --- the shipped configs --------------------------------------------------------------


def test_the_traefik_config_asks_the_check_copies_its_identity_and_strips_the_clients():
    config = yaml.safe_load(TRAEFIK.read_text())["http"]
    middlewares = config["middlewares"]
    router = config["routers"]["protected-app"]
    assert router["middlewares"] == [
        "token-service-unavailable",
        "token-service-strip-identity",
        "token-service-check",
        "token-service-drop-token",
    ]
    check = middlewares["token-service-check"]["forwardAuth"]
    assert check["address"] == "http://127.0.0.1:8080/auth/check"  # no query: the rules judge
    assert check["trustForwardHeader"] is False  # Traefik's X-Forwarded-*, never a client's
    assert check["authResponseHeaders"] == IDENTITY
    stripped = middlewares["token-service-strip-identity"]["headers"]["customRequestHeaders"]
    assert set(stripped) == {*STRIPPED, "X-Original-Method", "X-Original-URI"}
    assert set(stripped.values()) == {""}  # an empty value removes the header
    dropped = middlewares["token-service-drop-token"]["headers"]["customRequestHeaders"]
    assert dropped == {"Authorization": ""}
    unavailable = middlewares["token-service-unavailable"]["errors"]
    assert unavailable["status"] == ["500"]  # ForwardAuth's answer when the check fails
    assert unavailable["statusRewrites"] == {"500": 503}
    assert unavailable["service"] == "noop@internal"
    assert config["services"][router["service"]]["loadBalancer"]["servers"]


def envoy_filters() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Return Envoy's connection manager and its HTTP filters, in order."""
    config = yaml.safe_load(ENVOY.read_text())["static_resources"]
    (listener,) = config["listeners"]
    (chain,) = listener["filter_chains"]
    (manager,) = chain["filters"]
    return manager["typed_config"], manager["typed_config"]["http_filters"]


def test_the_envoy_config_asks_the_prefix_copies_the_identity_and_fails_closed():
    manager, filters = envoy_filters()
    assert [f["name"] for f in filters] == [
        "envoy.filters.http.header_mutation",
        "envoy.filters.http.ext_authz",
        "envoy.filters.http.router",
    ]
    removed = filters[0]["typed_config"]["mutations"]["request_mutations"]
    # and the client's X-Forwarded-Host: the check judged the request's own host
    assert {m["remove"] for m in removed} == {name.lower() for name in STRIPPED} | {
        "x-forwarded-host"
    }
    authz = filters[1]["typed_config"]
    assert authz["failure_mode_allow"] is False
    assert authz["status_on_error"] == {"code": "ServiceUnavailable"}  # 503, never a pass
    assert "with_request_body" not in authz  # no body: Content-Length 0
    service = authz["http_service"]
    assert service["path_prefix"] == ENVOY_PREFIX == "/auth/ext-authz"
    allowed = service["authorization_response"]["allowed_upstream_headers"]["patterns"]
    assert [pattern["exact"] for pattern in allowed] == [name.lower() for name in IDENTITY]
    clusters = yaml.safe_load(ENVOY.read_text())["static_resources"]["clusters"]
    assert service["server_uri"]["cluster"] in {cluster["name"] for cluster in clusters}
    (host,) = manager["route_config"]["virtual_hosts"]
    (route,) = host["routes"]
    assert route["request_headers_to_remove"] == ["authorization"]  # after the check
    assert manager["use_remote_address"] is True
    # the method overrides reach the check, which judges them as the method
    asked = {pattern["exact"] for pattern in authz["allowed_headers"]["patterns"]}
    assert {wsgi_name(key) for key in METHOD_OVERRIDES} <= asked
    # an identity header spelled with underscores never slips past the removals above
    options = manager["common_http_protocol_options"]
    assert options["headers_with_underscores_action"] == "REJECT_REQUEST"


def wsgi_name(key: str) -> str:
    """Return a header's name as Envoy's patterns spell it, from its WSGI environ key."""
    return key.removeprefix("HTTP_").lower().replace("_", "-")


def test_every_nginx_verdict_cache_key_holds_all_the_check_may_read():
    conf = (ROOT / "deploy" / "nginx" / "gateway-check.conf").read_text()
    keys = re.findall(r"proxy_cache_key \"([^\"]+)\";", conf)
    assert len(keys) == 3  # check, check-admin, check-rules
    needed = {"$request_method", "$host", "$request_uri", "$http_authorization"}
    needed |= {"$http_" + key.removeprefix("HTTP_").lower() for key in METHOD_OVERRIDES}
    for key in keys:
        assert needed <= set(re.split(r" |://", key)), key


# --- the service's side ---------------------------------------------------------------


@dataclass
class Service:
    server: Gunicorn
    secret: str

    def token(self, role: str, username: str = "carol") -> str:
        now = int(time.time())
        claims = {"username": username, "role": role, "iat": now, "exp": now + 600}
        return load_key_ring(self.secret).current.sign(claims)

    def ask(
        self, method: str, target: str, headers: dict[str, str], peer: str = "127.0.0.1"
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        """Send one request exactly as written, from the loopback address ``peer``."""
        connection = http.client.HTTPConnection(
            "127.0.0.1", self.server.port, timeout=10, source_address=(peer, 0)
        )
        try:
            connection.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            for name, value in headers.items():
                connection.putheader(name, value)
            connection.endheaders()
            response = connection.getresponse()
            return response.status, response.headers, response.read()
        finally:
            connection.close()


@pytest.fixture(scope="module")
def service(tmp_path_factory) -> Iterator[Service]:
    """A gunicorn of the service that judges by the rules and trusts 127.0.0.1 only."""
    folder = tmp_path_factory.mktemp("protocols")
    rules = folder / "rules.toml"
    rules.write_text(ACCESS_RULES)
    secret = secrets.token_urlsafe(48)
    env = {
        **base_environment(),
        "INSTANCE_PATH": str(folder / "instance"),
        "TRUSTED_PROXIES": "127.0.0.1/32",
        "OPEN_LOGIN": "true",  # said on purpose behind a proxy; the tests sign their tokens
        "ACCESS_RULES_FILE": str(rules),
        "SIGNING_SECRET": secret,
        "AUTH_CHECK_COOKIE": "on",
        "LOG_LEVEL": "WARNING",
    }
    server = Gunicorn(env, 1, folder / "gunicorn.log").start()
    yield Service(server, secret)
    server.kill()


def traefik(
    service: Service,
    method: str,
    uri: str,
    client: dict[str, str],
    host: str = HOST,
    peer: str = "127.0.0.1",
) -> tuple[int, http.client.HTTPMessage, bytes]:
    """Ask as Traefik's ForwardAuth (trustForwardHeader: false) does for ``method uri``."""
    headers = {
        "Host": f"127.0.0.1:{service.server.port}",  # the address's, Go's client sets it
        "User-Agent": client.get("User-Agent", "Mozilla/5.0"),
        **{name: value for name, value in client.items() if name != "User-Agent"},
        "X-Forwarded-For": "203.0.113.7",
        "X-Forwarded-Method": method,
        "X-Forwarded-Proto": "https",
        "X-Forwarded-Port": "443",
        "X-Forwarded-Host": host,
        "X-Forwarded-Uri": uri,
        "Accept-Encoding": "gzip",  # Go's transport
    }
    return service.ask("GET", "/auth/check", headers, peer)


def envoy(
    service: Service,
    method: str,
    uri: str,
    client: dict[str, str],
    host: str = HOST,
    peer: str = "127.0.0.1",
) -> tuple[int, http.client.HTTPMessage, bytes]:
    """Ask as Envoy's ext_authz HTTP filter (the shipped allowed_headers) does."""
    allowed = {"authorization", "cookie", "origin", "sec-fetch-site"}
    headers = {
        "host": host,  # the original :authority
        "content-length": "0",
        **{name.lower(): value for name, value in client.items() if name.lower() in allowed},
        "x-forwarded-for": "203.0.113.7",  # use_remote_address: the client's address
        "x-forwarded-proto": "https",
        "x-envoy-expected-rq-timeout-ms": "5000",
    }
    return service.ask(method, ENVOY_PREFIX + uri, headers, peer)


PROTOCOLS = {"traefik": traefik, "envoy": envoy}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(params=sorted(PROTOCOLS))
def ask(request, service):
    def asking(method: str, uri: str, client: dict[str, str], host: str = HOST, **peer: str):
        return PROTOCOLS[request.param](service, method, uri, client, host, **peer)

    return asking


def assert_answer(answer, expected) -> None:
    status, headers, body = answer
    assert (status, headers["Content-Type"], body) == expected
    assert headers["Cache-Control"] == "no-store"
    if status == 401:
        assert headers.get_all("WWW-Authenticate") == ["Bearer"]


def test_no_token_is_401_with_the_body_and_challenge(ask):
    assert_answer(ask("GET", "/reports", {}), SERVICE_401)
    assert_answer(ask("GET", "/admin/panel", bearer("x.y.z")), SERVICE_401)


def test_users_and_admins_pass_where_they_belong_with_exactly_200_and_their_identity(ask, service):
    for role, method, uri, host in [
        ("user", "GET", "/reports?q=1", HOST),
        ("user", "POST", "/reports", HOST),
        ("admin", "GET", "/admin/panel", HOST),
        ("admin", "DELETE", "/reports/1", HOST),
        ("admin", "GET", "/reports", "admin.example.com"),
    ]:
        status, headers, body = ask(method, uri, bearer(service.token(role, f"{role}-x")), host)
        assert (status, body) == (200, b""), (role, method, uri, host)  # Envoy: 200 only
        assert headers["X-Auth-Request-User"] == f"{role}-x"
        assert headers["X-Auth-Request-Groups"] == role


def test_the_rules_read_the_method_host_and_path_the_proxy_names(ask, service):
    user = bearer(service.token("user"))
    assert_answer(ask("GET", "/admin/panel", user), SERVICE_403)
    assert_answer(ask("DELETE", "/reports/1", user), SERVICE_403)
    assert_answer(ask("GET", "/reports", user, "admin.example.com"), SERVICE_403)
    assert ask("GET", "/public/logo.svg", {})[:1] == (200,)  # public: no token at all


def test_an_expired_token_is_401(ask, service):
    now = int(time.time())
    claims = {"username": "carol", "role": "admin", "iat": now - 60, "exp": now - 1}
    expired = load_key_ring(service.secret).current.sign(claims)
    assert_answer(ask("GET", "/reports", bearer(expired)), SERVICE_401)


def test_the_cookie_token_passes_a_sibling_hosts_get_never_its_post(ask, service):
    # Traefik names the method in X-Forwarded-Method; Envoy asks with the method itself.
    token = issue_cookie_token({"source": "corp", "id": "7"}, load_key_ring(service.secret), 60)
    cookie = {"Cookie": f"jwt={token}"}
    status, headers, _ = ask("GET", "/reports", cookie)
    assert (status, headers["X-Auth-Request-User"]) == (200, "corp:7")
    sibling = {**cookie, "Sec-Fetch-Site": "same-site", "Origin": "https://other.example.com"}
    assert ask("GET", "/reports", sibling)[0] == 200
    assert_answer(ask("POST", "/reports", sibling), SERVICE_401)
    named_get = {**sibling, "X-Original-Method": "GET", "X-Forwarded-Method": "GET"}
    assert_answer(ask("POST", "/reports", named_get), SERVICE_401)  # a client's own names


def test_the_envoy_prefix_answers_any_method_and_reads_no_body(service):
    user = bearer(service.token("user"))
    for method in ["GET", "HEAD", "POST", "PUT", "PATCH", "OPTIONS", "PROPFIND", "MKCOL"]:
        assert envoy(service, method, "/reports", user)[0] == 200, method
    for method in ["TRACE", "X-CUSTOM", "SEARCH"]:  # any token, never a 405
        assert envoy(service, method, "/reports", user)[0] == 200, method
    headers = {"host": HOST, "content-length": "5", **user}  # a body the check never reads
    connection = http.client.HTTPConnection("127.0.0.1", service.server.port, timeout=10)
    connection.request("POST", f"{ENVOY_PREFIX}/reports", body=b"x=1&y", headers=headers)
    assert connection.getresponse().status == 200
    connection.close()


def test_a_peer_not_trusted_is_never_believed(ask, service):
    # From 127.0.0.2 the host, method and URI a request names are not believed, so the
    # first rule (by host) cannot be judged, and denies.
    admin = bearer(service.token("admin"))
    for uri in ["/reports", "/public/logo.svg"]:
        assert ask("GET", uri, admin)[0] == 200, uri
        status, _, body = ask("GET", uri, admin, peer="127.0.0.2")
        assert (status, body) == (403, SERVICE_403[2]), uri


def assert_not_passed_to_the_admin_pages(ask, service, uri: str) -> None:
    status, _, body = ask("GET", uri, bearer(service.token("user")))
    if laxest_reading(uri).startswith("/admin"):
        assert 400 <= status < 500, (uri, status, body)
        if status == 400:
            assert "message" in json.loads(body)


def test_no_spelling_of_an_admin_path_lets_a_user_through(ask, service):
    for uri in ["/ADMIN/panel", "/x/..;/admin/panel", "/admin;/panel", *ADMIN_SPELLINGS]:
        if "#" in uri:  # a client never sends one: each proxy takes it as the fragment
            continue
        assert_not_passed_to_the_admin_pages(ask, service, uri)


@settings(max_examples=60, deadline=None)
@given(uri=admin_spellings())
def test_a_user_never_passes_to_the_admin_pages_by_any_spelling(service, uri):
    for protocol in PROTOCOLS.values():

        def asking(method, target, client, host=HOST, protocol=protocol):
            return protocol(service, method, target, client, host)

        assert_not_passed_to_the_admin_pages(asking, service, uri)
