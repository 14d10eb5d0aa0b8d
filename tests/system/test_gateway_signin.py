"""Browser sign-in through the shipped gateway: a real nginx with deploy/nginx/
gateway-browser-example.conf and gateway-signin.conf, a real gunicorn of the service and a
real OpenID Connect provider (node oidc-provider), and an upstream that echoes what it got.

A browser (Accept: text/html) without a cookie token is sent to sign in, logs in at the
provider and lands back on the URL it asked for; the upstream then sees who it is, with the
role the provider's groups grant and the email only when the provider verified it. An API
client keeps its 401. Driven by a client that asks for pages, and once by Debian's
headless Chromium, whose requests say which site they come from (Sec-Fetch-Site). The
same through Caddy, with deploy/caddy/Caddyfile's sign-in lines uncommented.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin

import pytest
import requests

from tests.helpers.browser import chromium, wait_for
from tests.helpers.caddy import start_caddy
from tests.helpers.echo_upstream import EchoUpstream, headers_of
from tests.helpers.nginx import nginx_binary, run_nginx, site_config
from tests.helpers.oidc_harness import node_unavailable_reason, start_provider, walk_login
from tests.helpers.onward_page import onward_url
from tests.helpers.servers import Gunicorn, free_port, stop_process
from tests.helpers.tools import ROOT, require_tool

pytestmark = [pytest.mark.nginx, pytest.mark.gunicorn, pytest.mark.oidc]

DEPLOY = ROOT / "deploy" / "nginx"
EXAMPLE = DEPLOY / "gateway-browser-example.conf"
SIGNIN = DEPLOY / "gateway-signin.conf"
SNIPPETS = "/etc/nginx/snippets/token-service/"
USER = "user root;\n" if os.geteuid() == 0 else ""
#: The gateway's address: a site of its own (an IP address is one), the provider's being
#: 127.0.0.1, so that a real browser's requests carry what crossing sites makes them carry.
HOST = "127.0.0.2"
CLIENT_ID = "token-service"
CLIENT_SECRET = "oidc-client-secret-for-tests-only"
FALLBACK = "/welcome"
#: Accept of a browser's navigation (Chromium's).
PAGE = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


class Browser(requests.Session):
    """A cookie-keeping client that asks for pages, as a browser navigates; 10 s at most."""

    def __init__(self) -> None:
        super().__init__()
        self.trust_env = False
        self.headers["Accept"] = PAGE

    def request(self, *args, **kwargs):
        kwargs.setdefault("timeout", 10)
        return super().request(*args, **kwargs)


@dataclass
class Site:
    url: str
    issuer: str
    echo: EchoUpstream

    def sign_in(self, browser: Browser, path: str, login: str) -> requests.Response:
        """Ask for ``path`` as a browser, sign in at the provider as ``login``, and go where
        the callback's page sends the browser; return the last answer."""
        asked = browser.get(self.url + path, allow_redirects=False)
        authorize = urljoin(asked.url, asked.headers.get("Location", ""))
        while asked.status_code == 302 and authorize.startswith(self.url + "/"):
            # Caddy's sign-in is a redirect to the login start of the same site
            asked = browser.get(authorize, allow_redirects=False)
            authorize = urljoin(asked.url, asked.headers.get("Location", ""))
        assert asked.status_code == 302, asked.text
        assert authorize.startswith(self.issuer + "/"), authorize
        to_callback = walk_login(browser, authorize, login=login)
        callback = urljoin(authorize, to_callback.headers["Location"])
        assert callback.startswith(f"{self.url}/auth/local/callback?"), callback
        return browser.get(self.back_from(browser, callback))

    def back_from(self, browser: Browser, callback: str) -> str:
        """Call the callback; return the URL its page sends the browser on to."""
        finished = browser.get(callback, allow_redirects=False)
        assert finished.status_code == 200, finished.text
        return onward_url(finished.text)


def gateway_site(port: int, upstream_port: int, prefix: Path) -> str:
    text = EXAMPLE.read_text()
    for old, new in [
        ("listen 8082;", f"listen {HOST}:{port};"),
        ("server 127.0.0.1:9001;", f"server 127.0.0.1:{upstream_port};"),
        ("/run/token-service-verdicts", str(prefix / "verdicts")),
    ]:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text.replace(SNIPPETS, f"{prefix}/snippets/")


def start_nginx(prefix: Path, port: int, service_port: int, upstream_port: int):
    snippets = prefix / "snippets"
    snippets.mkdir(parents=True)
    for name in ("gateway-check.conf", "gateway-identity.conf"):
        (snippets / name).write_text((DEPLOY / name).read_text())
    signin = SIGNIN.read_text()
    assert signin.count("/auth/corp/login?") == 1
    (snippets / "gateway-signin.conf").write_text(signin.replace("/corp/", "/local/"))
    (prefix / "site.conf").write_text(
        site_config(free_port(), service_port, prefix / "service-access.log")
    )
    (prefix / "gateway.conf").write_text(gateway_site(port, upstream_port, prefix))
    return run_nginx(
        prefix,
        f"include {prefix}/site.conf;\ninclude {prefix}/gateway.conf;",
        f"http://{HOST}:{port}/auth/local/login",
    )


def service_environment(folder: Path, issuer: str) -> dict[str, str]:
    """Return the service's settings behind a gateway on HOST: the cookie check on, the
    provider's ``admins`` group made admins, HOST allowed to return to."""
    return {
        **{key: value for key, value in os.environ.items() if key in {"PATH", "HOME"}},
        "INSTANCE_PATH": str(folder / "instance"),
        "LOG_LEVEL": "INFO",
        "SIGNING_SECRET": secrets.token_urlsafe(48),
        "TRUSTED_PROXIES": "127.0.0.1/32",
        "OPEN_LOGIN": "true",
        "AUTH_CHECK_COOKIE": "on",
        "AUTH_COOKIE_SECURE": "false",
        "LOGIN_REDIRECT_URL": FALLBACK,
        "LOGIN_RETURN_DOMAINS": HOST,
        "OIDC_PROVIDERS": "local",
        "OIDC_LOCAL_ISSUER": issuer,
        "OIDC_LOCAL_CLIENT_ID": CLIENT_ID,
        "OIDC_LOCAL_CLIENT_SECRET": CLIENT_SECRET,
        "OIDC_LOCAL_ADMIN_GROUPS": "admins",
    }


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[Site]:
    """nginx before the service (cookie check on, the provider's ``admins`` group made
    admins, this host allowed to return to) and a provider that knows nginx's callback."""
    reason = node_unavailable_reason()
    require_tool(reason is None, "node and the oidc-provider package", str(reason))
    require_tool(nginx_binary() is not None, "nginx", "apt-get install nginx")
    folder = tmp_path_factory.mktemp("signin")
    port = free_port()
    url = f"http://{HOST}:{port}"
    provider = start_provider(free_port(), CLIENT_ID, CLIENT_SECRET, [f"{url}/auth/local/callback"])
    echo = EchoUpstream()
    env = service_environment(folder, provider.issuer)
    service = Gunicorn(env, 1, folder / "gunicorn.log")
    try:
        service.start()
        nginx = start_nginx(folder / "nginx", port, service.port, echo.port)
        try:
            yield Site(url, provider.issuer, echo)
        finally:
            stop_process(nginx)
    finally:
        service.kill()
        echo.stop()
        provider.stop()


def test_a_browser_signs_in_and_lands_back_where_it_asked_as_an_admin(site):
    browser = Browser()
    path = "/admin/reports?month=11&year=2026&q=a%26b"
    landed = site.sign_in(browser, path, login="admin-alice")
    assert landed.status_code == 200, landed.text
    assert landed.url == site.url + path
    received = landed.json()
    assert received["path"] == path
    for name, value in [
        ("X-Auth-Request-User", "local:admin-alice"),
        ("X-Auth-Request-Groups", "admin"),
        ("X-Auth-Request-Email", "admin-alice@example.com"),
        ("Remote-Email", "admin-alice@example.com"),
        ("X-Auth-Request-Name", "Admin%20Alice%20Example"),
    ]:
        assert headers_of(received, name) == [value], name


def test_a_signed_in_user_is_a_user_and_an_unverified_email_never_passes(site):
    browser = Browser()
    landed = site.sign_in(browser, "/reports", login="bob-unverified")
    assert landed.status_code == 200, landed.text
    received = landed.json()
    assert headers_of(received, "X-Auth-Request-Groups") == ["user"]
    assert headers_of(received, "X-Auth-Request-Email") == []
    forged = {"X-Auth-Request-Email": "root@example.com", "Remote-Email": "root@example.com"}
    received = browser.get(site.url + "/reports/again", headers=forged).json()
    assert headers_of(received, "X-Auth-Request-Email") == []
    assert headers_of(received, "Remote-Email") == []
    refused = browser.get(site.url + "/admin/panel", allow_redirects=False)
    assert refused.status_code == 403  # signed in: no second sign-in, the 403
    assert "/admin/panel" not in site.echo.paths()


@pytest.mark.parametrize("accept", [None, "application/json", "*/*", "text/plain"])
def test_an_api_client_keeps_its_401(site, accept):
    headers = {} if accept is None else {"Accept": accept}
    answer = requests.get(site.url + "/reports", headers=headers, allow_redirects=False, timeout=10)
    assert answer.status_code == 401
    assert answer.text == "Unauthorized"
    assert answer.headers["WWW-Authenticate"] == "Bearer"
    assert "Location" not in answer.headers


def test_a_return_url_the_client_writes_in_the_header_is_replaced_by_nginxs(site):
    browser = Browser()
    forged = {"X-Auth-Request-Redirect": "https://evil.test/"}
    asked = browser.get(site.url + "/reports/mine", headers=forged, allow_redirects=False)
    to_callback = walk_login(browser, asked.headers["Location"], login="erin")
    callback = urljoin(asked.headers["Location"], to_callback.headers["Location"])
    assert site.back_from(browser, callback) == site.url + "/reports/mine"


def test_the_clients_own_query_never_names_the_return_url(site):
    browser = Browser()
    asked = browser.get(site.url + "/reports?rd=https://evil.test/", allow_redirects=False)
    to_callback = walk_login(browser, asked.headers["Location"], login="dave")
    callback = urljoin(asked.headers["Location"], to_callback.headers["Location"])
    assert site.back_from(browser, callback) == site.url + "/reports?rd=https://evil.test/"


@pytest.mark.browser
def test_a_real_browser_signs_in_through_the_gateway_and_lands_back(site, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as seen

    path = "/reports?month=11&year=2026"
    with chromium(tmp_path) as browser:
        browser.get(site.url + path)
        login = wait_for(browser, seen.element_to_be_clickable((By.NAME, "login")), "the login")
        assert browser.current_url.startswith(site.issuer + "/")
        login.send_keys("admin-zoe")
        browser.find_element(By.NAME, "password").send_keys("any password")
        browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
        consent = wait_for(
            browser,
            seen.presence_of_element_located(
                (By.CSS_SELECTOR, "input[name=prompt][value=consent]")
            ),
            "the consent form",
        )
        consent.find_element(By.XPATH, "./ancestor::form//button[@type='submit']").click()
        wait_for(browser, seen.url_to_be(site.url + path), "the way back")
        received = json.loads(browser.find_element(By.TAG_NAME, "body").text)
    assert received["path"] == path
    assert headers_of(received, "X-Auth-Request-User") == ["local:admin-zoe"]
    assert headers_of(received, "X-Auth-Request-Groups") == ["admin"]
    assert headers_of(received, "X-Auth-Request-Email") == ["admin-zoe@example.com"]


# --- Caddy: deploy/caddy/Caddyfile with its sign-in lines -------------------------------


@pytest.fixture(scope="module")
def caddy_site(tmp_path_factory) -> Iterator[Site]:
    """The shipped Caddyfile, its sign-in uncommented, before the service and the provider,
    as ``site``."""
    require_tool(shutil.which("caddy") is not None, "caddy", "apt-get install caddy")
    reason = node_unavailable_reason()
    require_tool(reason is None, "node and the oidc-provider package", str(reason))
    folder = tmp_path_factory.mktemp("caddy-signin")
    port = free_port()
    url = f"http://{HOST}:{port}"
    provider = start_provider(free_port(), CLIENT_ID, CLIENT_SECRET, [f"{url}/auth/local/callback"])
    echo = EchoUpstream()
    service = Gunicorn(service_environment(folder, provider.issuer), 1, folder / "gunicorn.log")
    try:
        service.start()
        caddy = start_caddy(
            folder / "caddy", service.port, echo.port, HOST, signin_provider="local", port=port
        )
        assert caddy.url == url
        try:
            yield Site(caddy.url, provider.issuer, echo)
        finally:
            caddy.stop()
    finally:
        service.kill()
        echo.stop()
        provider.stop()


def test_caddys_shipped_sign_in_sends_a_browser_to_the_login_and_back(caddy_site):
    browser = Browser()
    landed = caddy_site.sign_in(browser, "/reports", login="admin-carol")
    assert landed.status_code == 200, landed.text
    received = landed.json()
    assert received["path"] == "/reports"
    assert headers_of(received, "X-Auth-Request-Groups") == ["admin"]
    assert headers_of(received, "X-Auth-Request-Email") == ["admin-carol@example.com"]


def test_caddys_sign_in_brings_a_browser_back_to_a_page_with_a_query(caddy_site):
    browser = Browser()
    landed = caddy_site.sign_in(browser, "/reports?year=2026", login="carol")
    assert landed.status_code == 200, landed.text
    assert landed.json()["path"] == "/reports?year=2026"
    assert headers_of(landed.json(), "X-Auth-Request-Groups") == ["user"]


@pytest.mark.parametrize("accept", [None, "application/json"])
def test_caddys_shipped_sign_in_keeps_an_api_clients_401(caddy_site, accept):
    headers = {} if accept is None else {"Accept": accept}
    answer = requests.get(
        caddy_site.url + "/reports", headers=headers, allow_redirects=False, timeout=10
    )
    assert answer.status_code == 401
    assert answer.text == "Unauthorized"
    assert answer.headers["WWW-Authenticate"] == "Bearer"
