"""A real browser through the third-party login: Debian's headless Chromium, driven by
Selenium through Debian's chromedriver, never a browser or driver downloaded.

Three sites, as in production, each a loopback address of its own (an IP address is a
site of its own): the provider (the real node oidc-provider on its defaults) on
127.0.0.1, the service (a real gunicorn, on its default cookie settings) on 127.0.0.2,
and another site's page on 127.0.0.3. Chromium takes every 127.0.0.0/8 origin for a
secure context, so the cookie keeps its default ``Secure`` over plain http here. How to
run it: docs/third-party-login.md, "In a real browser".
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.browser import (
    CHROMEDRIVER,
    CHROMIUM,
    STEP_TIMEOUT,
    chromium,
    debian_version,
    run_async,
    wait_for,
)
from tests.helpers.oidc_harness import node_unavailable_reason, start_provider
from tests.helpers.servers import Gunicorn, free_port, wait_until
from tests.helpers.tools import require_tool

pytestmark = [
    pytest.mark.browser,
    pytest.mark.oidc,
    pytest.mark.gunicorn,
]

PROVIDER_HOST, SERVICE_HOST, OTHER_SITE_HOST = "127.0.0.1", "127.0.0.2", "127.0.0.3"
CLIENT_ID = "token-service"
CLIENT_SECRET = "browser-test-client-secret-only"
LIFETIME = 900
ALICE = {"source": "local", "id": "alice", "shownName": "Alice Example"}


@dataclass
class Service:
    url: str
    log_path: Path

    def request_lines(self, path: str) -> list[dict[str, Any]]:
        """Return the request log's lines about ``path`` (the request log is always on)."""
        written = self.log_path.read_text().split("\n")[:-1]  # the last: cut, or being written
        lines = [json.loads(line) for line in written if line]
        return [line for line in lines if line.get("logger") == "request" and line["path"] == path]


class SiteGunicorn(Gunicorn):
    """A gunicorn on a loopback address other than 127.0.0.1: a site of its own."""

    @property
    def url(self) -> str:
        host, port = self.listener.getsockname()
        return f"http://{host}:{port}"


def bound_listener(host: str) -> socket.socket:
    listener = socket.socket()
    listener.bind((host, 0))
    listener.listen(128)
    listener.set_inheritable(True)
    return listener


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The service on 127.0.0.2 with the provider, on its defaults, on 127.0.0.1."""
    reason = node_unavailable_reason()
    require_tool(reason is None, "node and the oidc-provider package", str(reason))
    folder = tmp_path_factory.mktemp("browser")
    env = {key: value for key, value in os.environ.items() if key in {"PATH", "HOME"}}
    server = SiteGunicorn(env, 2, folder / "gunicorn.log", bound_listener(SERVICE_HOST))
    callback = f"{server.url}/auth/local/callback"
    provider = start_provider(free_port(), CLIENT_ID, CLIENT_SECRET, [callback])
    try:
        server.env.update(
            {
                "INSTANCE_PATH": str(folder / "instance"),
                "SIGNING_SECRET": secrets.token_urlsafe(48),
                "OIDC_PROVIDERS": "local",
                "OIDC_LOCAL_ISSUER": provider.issuer,
                "OIDC_LOCAL_CLIENT_ID": CLIENT_ID,
                "OIDC_LOCAL_CLIENT_SECRET": CLIENT_SECRET,
                "COOKIE_TOKEN_LIFETIME": str(LIFETIME),
                "LOG_LEVEL": "WARNING",
            }  # AUTH_COOKIE_SECURE, LOGIN_REDIRECT_URL (/api/v1/me): their defaults
        )
        server.start()
        yield Service(server.url, server.log_path)
    finally:
        server.stop()
        provider.stop()


@pytest.fixture(scope="module")
def other_site() -> Iterator[str]:
    """Return the URL of a blank page of another site (127.0.0.3), served while needed."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<!doctype html><title>another site</title><p>another site</p>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((OTHER_SITE_HOST, 0), Page)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://{OTHER_SITE_HOST}:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()
    thread.join(STEP_TIMEOUT)


@pytest.fixture(scope="module")
def browser(
    tmp_path_factory: pytest.TempPathFactory, service: Service, other_site: str
) -> Iterator[Any]:
    """One headless Chromium for the module, from Debian's packages; none downloaded.

    It asks for the sites it visits so that it quits first, closing its kept-alive
    connections: gunicorn, stopped after, then need not wait for them.
    """
    with chromium(tmp_path_factory.mktemp("chromium")) as driver:
        yield driver


def log_in(browser: Any, service: Service) -> None:
    """Go from the service's login route through the provider's login and consent pages."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as seen

    browser.execute_cdp_cmd("Network.clearBrowserCookies", {})  # the provider's session too
    browser.get(f"{service.url}/auth/local/login")
    login = wait_for(browser, seen.element_to_be_clickable((By.NAME, "login")), "the login form")
    assert browser.current_url.startswith(f"http://{PROVIDER_HOST}:")
    login.send_keys("alice")
    browser.find_element(By.NAME, "password").send_keys("any password")
    browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    consent = wait_for(
        browser,
        seen.presence_of_element_located((By.CSS_SELECTOR, "input[name=prompt][value=consent]")),
        "the consent form",
    )
    consent.find_element(By.XPATH, "./ancestor::form//button[@type='submit']").click()
    wait_for(browser, seen.url_to_be(f"{service.url}/api/v1/me"), "the way back")


def test_the_browser_is_debians_own(browser):
    assert browser.service.path == CHROMEDRIVER
    assert browser.capabilities["browserVersion"] == debian_version(CHROMIUM)
    driver_version = browser.capabilities["chrome"]["chromedriverVersion"].split()[0]
    assert driver_version == debian_version(CHROMEDRIVER)


def test_login_me_and_logout_in_a_real_browser(browser, service):
    before = int(time.time())
    log_in(browser, service)
    after = int(time.time())
    # the page's own script asks who is logged in, and shows it
    shown = run_async(
        browser,
        "const answer = await fetch('/api/v1/me');"
        "const user = await answer.json();"
        "document.body.textContent = 'Signed in as ' + user.shownName;"
        "return [answer.status, user];",
    )
    assert shown == [200, ALICE]
    assert browser.find_element("tag name", "body").text == "Signed in as Alice Example"

    (cookie,) = [cookie for cookie in browser.get_cookies() if cookie["name"] == "jwt"]
    assert cookie["domain"] == SERVICE_HOST  # host-only: no Domain attribute
    assert cookie["path"] == "/"
    assert cookie["httpOnly"] is True
    assert cookie["secure"] is True  # AUTH_COOKIE_SECURE's default, kept on loopback http
    assert cookie["sameSite"] == "Lax"
    assert before + LIFETIME <= cookie["expiry"] <= after + LIFETIME
    assert "jwt=" not in browser.execute_script("return document.cookie")  # HttpOnly

    statuses = run_async(
        browser,
        "const logout = await fetch('/auth/logout', {method: 'POST'});"
        "const me = await fetch('/api/v1/me');"
        "return [logout.status, me.status];",
    )
    assert statuses == [204, 401]
    every_cookie = browser.execute_cdp_cmd("Network.getAllCookies", {})["cookies"]
    assert [cookie for cookie in every_cookie if cookie["name"] == "jwt"] == []


def test_another_site_can_neither_read_me_nor_log_the_user_out(browser, service, other_site):
    log_in(browser, service)
    browser.get(other_site)
    me = f"{service.url}/api/v1/me"
    logout = f"{service.url}/auth/logout"
    # no CORS header: the answer cannot be read, with or without CORS mode
    read = "try { await fetch(args[0], {credentials: 'include'}) } catch (e) { return e.name }"
    assert run_async(browser, read + "; return 'read'", me) == "TypeError"
    opaque = run_async(
        browser,
        "const r = await fetch(args[0], {mode: 'no-cors', credentials: 'include'});"
        "return [r.type, r.status, await r.text()];",
        me,
    )
    assert opaque == ["opaque", 0, ""]

    # a logout sent behind the user's back, as a fetch and as a form the page submits
    def logouts() -> list[dict[str, Any]]:
        return service.request_lines("/auth/logout")

    before = logouts()
    run_async(
        browser,
        "await fetch(args[0], {method: 'POST', mode: 'no-cors', credentials: 'include'})",
        logout,
    )
    browser.execute_script(
        "const form = document.createElement('form');"
        "form.method = 'post'; form.action = arguments[0];"
        "document.body.append(form); form.submit();",
        logout,
    )
    wait_until(lambda: len(logouts()) == len(before) + 2, STEP_TIMEOUT, "the form's request")
    answers = [(line["status"], line.get("reason")) for line in logouts()[len(before) :]]
    assert answers == [(403, "cross_site")] * 2
    wait_for(browser, lambda driver: driver.current_url == logout, "the form's answer")
    assert json.loads(browser.find_element("tag name", "body").text) == {"message": "No access"}
    # still logged in: the cookie is there, and the service's own page reads the user
    assert [cookie["name"] for cookie in browser.get_cookies()].count("jwt") == 1
    browser.get(me)
    assert run_async(browser, "return (await fetch('/api/v1/me')).json()") == ALICE
