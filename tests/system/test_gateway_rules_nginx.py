"""The rules behind a real nginx with its verdict cache: one auth_request location for every
path, the original method and URI passed on, the cache keyed on all a rule reads; a kept
pass for one path is never a pass for another, and no spelling of the admin path reaches
the upstream with a user's token."""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from tests.helpers.nginx import nginx_binary, run_nginx
from tests.helpers.servers import Gunicorn, free_port, fresh, stop_process
from tests.helpers.tools import require_tool

pytestmark = [pytest.mark.nginx, pytest.mark.gunicorn]

RULES = """
[[rules]]
paths = ["/public/"]
allow = "public"

[[rules]]
paths = ["/admin/"]
allow = "admin"

[[rules]]
paths = ["/app/"]
methods = ["DELETE"]
allow = "admin"

[[rules]]
allow = "user"
"""
#: All a rule reads: the method, each method override, the host, the URI as sent.
CACHE_KEY = (
    "$request_method $host $request_uri"
    " $http_x_http_method_override $http_x_http_method $http_x_method_override"
    " $http_authorization"
)
#: nginx's workers write the cache in the test's folder, which only its owner may enter.
USER = "user root;\n" if os.geteuid() == 0 else ""
#: The gateway under test: every path asks the check, which the rules answer; the cache key
#: holds the method, the host and the URI as sent (docs/gateway.md, the verdict cache).
SITE = """
proxy_cache_path {prefix}/verdicts levels=1 keys_zone=verdicts:1m max_size=8m inactive=60s;
upstream token_service {{ server 127.0.0.1:{service}; keepalive 4; }}
server {{
    listen 127.0.0.1:{port};
    location / {{
        auth_request /_check;
        proxy_pass http://127.0.0.1:{upstream};
    }}
    location = /_check {{
        internal;
        proxy_pass http://token_service/auth/check;
        proxy_pass_request_body off;
        proxy_set_header Content-Length "";
        proxy_set_header X-Original-Method $request_method;
        proxy_set_header X-Original-URI $request_uri;
        proxy_set_header Host $host;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_cache verdicts;
        proxy_cache_key "{cache_key}";
        proxy_ignore_headers Cache-Control Expires;
        proxy_cache_valid any 0;
        proxy_cache_use_stale off;
    }}
}}
"""


class Upstream:
    """An upstream on a free port that answers 200 and keeps the paths it was asked for."""

    def __init__(self) -> None:
        seen = self.seen = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.port = self.server.server_address[1]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Stack:
    def __init__(self, url: str, upstream: Upstream, service: Gunicorn, rules: Path) -> None:
        self.url, self.upstream, self.service, self.rules = url, upstream, service, rules

    def token(self, username: str) -> str:
        answer = fresh("POST", f"{self.service.url}/login", json={"username": username})
        return answer.json()["accessToken"]

    def get(self, path: str, token: str | None = None, **headers: str) -> int:
        """Send ``path`` as it is written (no client-side normalisation) and return the status."""
        headers = {**_bearer(token), **{name.replace("_", "-"): v for name, v in headers.items()}}
        request = requests.Request("GET", self.url + "/", headers=headers).prepare()
        request.url = self.url + path
        with requests.Session() as session:
            return session.send(request, timeout=15).status_code


def _bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    require_tool(nginx_binary() is not None, "nginx", "apt-get install nginx")  # first
    folder = tmp_path_factory.mktemp("rules-nginx")
    rules = folder / "rules.toml"
    rules.write_text(RULES)
    env = {
        **{key: value for key, value in os.environ.items() if key in {"PATH", "HOME"}},
        "INSTANCE_PATH": str(folder / "instance"),
        "LOG_LEVEL": "WARNING",
        "SIGNING_SECRET": secrets.token_urlsafe(48),
        "TRUSTED_PROXIES": "127.0.0.1/32",
        "OPEN_LOGIN": "true",
        "ACCESS_RULES_FILE": str(rules),
        "AUTH_CHECK_CACHE_SECONDS": "30",
    }
    service = Gunicorn(env, 1, folder / "gunicorn.log").start()
    upstream = Upstream()
    prefix = folder / "nginx"
    prefix.mkdir()
    port = free_port()
    site = SITE.format(
        prefix=prefix, service=service.port, port=port, upstream=upstream.port, cache_key=CACHE_KEY
    )
    url = f"http://127.0.0.1:{port}"
    process = run_nginx(prefix, site, f"{url}/public/ready")
    try:
        yield Stack(url, upstream, service, rules)
    finally:
        stop_process(process)
        upstream.stop()
        service.stop()


def test_a_kept_pass_for_one_path_is_never_a_pass_for_another(stack):
    user = stack.token("alice")
    for _ in range(3):  # the second and third from the cache, for the first path
        assert stack.get("/app/items", user) == 200
        assert stack.get("/admin/panel", user) == 403
    admin = stack.token("admin")
    assert stack.get("/admin/panel", admin) == 200
    assert stack.get("/public/logo.png") == 200
    assert stack.get("/app/items") == 401


def test_a_kept_pass_is_never_a_pass_for_a_method_override(stack):
    user = stack.token("alice")
    for _ in range(2):  # the second from the cache
        assert stack.get("/app/items", user) == 200
    before = len(stack.upstream.seen)
    for header in ("X_HTTP_Method_Override", "X_HTTP_Method", "X_Method_Override"):
        assert stack.get("/app/items", user, **{header: "DELETE"}) == 403
    assert len(stack.upstream.seen) == before


@pytest.mark.parametrize(
    "path",
    [
        "/ADMIN/panel",
        "/x/..;/admin/panel",
        "/admin;/panel",
        "/app/..%2fadmin/panel",
        "/app/%2e%2e/admin/panel",
        "/%61dmin/panel",
        "//admin//panel",
        "/app/..%5cadmin/panel",
        "/adm%C4%B1n/panel",
        "/%C4%B0%C5%BF/../admin/panel",
        "/admin./panel",
        "/admin%20/panel",
        "//host/admin/panel",
        "/app/%C0%AE%C0%AE/admin/panel",
        "/app/%u002e%u002e/admin/panel",
    ],
)
def test_no_spelling_of_the_admin_path_reaches_the_upstream_with_a_users_token(stack, path):
    user = stack.token("alice")
    assert stack.get("/app/warm", user) == 200  # a pass kept for this token already
    before = len(stack.upstream.seen)
    assert stack.get(path, user) == 403
    assert len(stack.upstream.seen) == before


def test_a_rules_change_does_not_drop_a_kept_pass_until_it_expires(stack):
    # docs/gateway.md, the verdict cache: the bound is AUTH_CHECK_CACHE_SECONDS (30 here)
    user = stack.token("carol")
    assert stack.get("/reports/kept", user) == 200  # kept by nginx for 30 s
    closed = '[[rules]]\npaths = ["/reports/"]\nallow = "admin"\n'
    stack.rules.write_text(closed + RULES)
    try:
        time.sleep(1.5)  # each worker reads the changed file within a second
        assert stack.get("/reports/new", user) == 403
        assert stack.get("/reports/kept", user) == 200  # the old rules' pass, from the cache
    finally:
        stack.rules.write_text(RULES)
