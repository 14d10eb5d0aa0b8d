"""The admin console (GET /admin/) in Debian's headless Chromium against a real gunicorn:
an admin signs in, lists a user's sessions and ends one; a user gets "admins only"; a
User-Agent of markup stays text; and the console of the browser has no CSP error.

Every run takes a screenshot of an admin's view; with UPDATE_SCREENSHOTS=1 it replaces
docs/images/admin-console.png, which is committed on purpose (a run leaves the checkout as
it found it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.helpers.browser import STEP_TIMEOUT, chromium, wait_for
from tests.helpers.servers import Gunicorn, gunicorn_environment, wait_until
from tests.helpers.tools import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.gunicorn]

SCREENSHOT = ROOT / "docs" / "images" / "admin-console.png"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: Seconds an access token lasts: short, so that the page renews its own during the test.
ACCESS_LIFETIME = 3
HOSTILE_AGENT = "<img src=x onerror=\"window.pwned=1;document.title='pwned'\">"


@dataclass
class Service:
    url: str
    log_path: Path

    def request_lines(self, method: str, path: str) -> list[dict[str, Any]]:
        """Return the request log's lines of ``method path``, oldest first."""
        written = self.log_path.read_text().split("\n")[:-1]  # the last: cut, or being written
        lines = [json.loads(line) for line in written if line.startswith("{")]
        return [
            line
            for line in lines
            if line.get("logger") == "request" and (line["method"], line["path"]) == (method, path)
        ]

    def log_in(self, username: str, agent: str) -> dict[str, str]:
        answer = requests.post(
            f"{self.url}/login",
            json={"username": username},
            headers={"User-Agent": agent},
            timeout=15,
        )
        assert answer.status_code == 200, answer.text
        return answer.json()

    def refresh_status(self, username: str, tokens: dict[str, str]) -> int:
        body = {"username": username, "refreshToken": tokens["refreshToken"]}
        return requests.post(f"{self.url}/token", json=body, timeout=15).status_code


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    folder = tmp_path_factory.mktemp("console")
    env = {"ACCESS_TOKEN_LIFETIME": str(ACCESS_LIFETIME), "LOG_LEVEL": "WARNING"}
    server = Gunicorn(gunicorn_environment(folder, None, env), 2, folder / "gunicorn.log")
    server.start()
    try:
        yield Service(server.url, server.log_path)
    finally:
        server.kill()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory, service: Service) -> Iterator[Any]:
    """One Chromium for the module; it quits before gunicorn stops (it asks for service)."""
    with chromium(tmp_path_factory.mktemp("chromium"), window=(1280, 720)) as driver:
        yield driver


def status_text(browser: Any) -> str:
    return browser.find_element("id", "status").text


def sign_in(browser: Any, service: Service, username: str) -> None:
    """Open the console afresh and sign in as ``username`` (no USERS_FILE: any password)."""
    from selenium.webdriver.common.by import By

    browser.get(f"{service.url}/admin/")
    form = browser.find_element(By.ID, "sign-in")
    form.find_element(By.NAME, "username").send_keys(username)
    form.find_element(By.NAME, "password").send_keys("any password")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(browser, lambda driver: "Signing in" not in status_text(driver), "the sign-in")


def shown_sessions(browser: Any) -> list[dict[str, str]]:
    rows = browser.find_elements("css selector", "#sessions tr")
    return [
        {
            "id": row.get_attribute("data-session"),
            "address": row.find_elements("tag name", "td")[3].text,
            "userAgent": row.find_elements("tag name", "td")[4].text,
        }
        for row in rows
    ]


def show_user(browser: Any, username: str) -> None:
    from selenium.webdriver.common.by import By

    field = browser.find_element(By.CSS_SELECTOR, "#find input[name=username]")
    field.clear()
    field.send_keys(username)
    browser.find_element(By.CSS_SELECTOR, "#find button[type=submit]").click()
    wait_for(
        browser,
        lambda driver: driver.find_element(By.ID, "shown-user").text == username,
        f"the sessions of {username}",
    )


def csp_errors(browser: Any) -> list[str]:
    """Return (and clear) the browser console's messages about the Content-Security-Policy."""
    messages = [entry["message"] for entry in browser.get_log("browser")]
    return [text for text in messages if "Content Security Policy" in text or "Refused" in text]


def test_an_admin_lists_a_user_s_sessions_ends_one_and_its_refresh_token_is_refused(
    browser, service
):
    from selenium.webdriver.support import expected_conditions as seen

    laptop = service.log_in("bob", "bob-laptop/1.0")
    phone = service.log_in("bob", "bob-phone/2.0")
    service.log_in("bob", HOSTILE_AGENT)
    sign_in(browser, service, "admin")
    assert browser.find_element("id", "signed-in-name").text == "admin"
    assert browser.find_element("id", "sign-in").is_displayed() is False
    show_user(browser, "bob")
    shown = shown_sessions(browser)
    # logged in within a second or so: the order (newest first) is tests/api's to check
    assert sorted(session["userAgent"] for session in shown) == sorted(
        [HOSTILE_AGENT, "bob-phone/2.0", "bob-laptop/1.0"]
    )
    assert {session["address"] for session in shown} == {"127.0.0.1"}

    # the markup is text: no image was made, and its handler never ran
    assert browser.find_elements("css selector", "#sessions img") == []
    assert browser.execute_script("return [window.pwned, document.title]") == [
        None,
        "Sessions · token service",
    ]
    screenshot = browser.get_screenshot_as_png()
    assert screenshot.startswith(PNG_SIGNATURE)
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        SCREENSHOT.write_bytes(screenshot)

    # the page renews its access token before it expires, and keeps working with the new one
    wait_for(
        browser,
        lambda _: any(line["status"] == 200 for line in service.request_lines("POST", "/token")),
        "the page's renewal of its access token",
    )
    (laptop_row,) = [
        row
        for row in browser.find_elements("css selector", "#sessions tr")
        if row.find_elements("tag name", "td")[4].text == "bob-laptop/1.0"
    ]
    session_id = laptop_row.get_attribute("data-session")
    laptop_row.find_element("tag name", "button").click()
    wait_for(browser, lambda driver: status_text(driver) == "Session ended.", "the end")
    assert [session["id"] for session in shown_sessions(browser)] == [
        session["id"] for session in shown if session["id"] != session_id
    ]
    ended = service.request_lines("DELETE", f"/admin/users/bob/sessions/{session_id}")
    assert [(line["status"], line["user"], line.get("event")) for line in ended] == [
        (204, "admin", "session_ended")
    ]
    assert service.refresh_status("bob", laptop) == 401
    assert service.refresh_status("bob", phone) == 200

    # ending them all asks first, then logs bob out everywhere
    browser.find_element("id", "end-all").click()
    wait_for(browser, seen.alert_is_present(), "the question").accept()
    wait_for(browser, lambda driver: status_text(driver) == "2 session(s) ended.", "the end")
    assert shown_sessions(browser) == []
    assert browser.find_element("id", "none").is_displayed() is True
    assert service.refresh_status("bob", phone) == 401
    assert csp_errors(browser) == []

    # signing out revokes the page's refresh token and forgets both tokens
    revoked = len(service.request_lines("DELETE", "/token/<redacted>"))
    browser.find_element("id", "sign-out").click()
    wait_for(browser, lambda driver: status_text(driver) == "Signed out.", "the sign-out")
    assert browser.find_element("id", "sign-in").is_displayed() is True
    assert browser.find_element("id", "console").is_displayed() is False
    wait_until(
        lambda: len(service.request_lines("DELETE", "/token/<redacted>")) == revoked + 1,
        STEP_TIMEOUT,
        "the revocation of the page's refresh token",
    )


def test_a_user_gets_admins_only_and_the_api_behind_answers_403(browser, service):
    sign_in(browser, service, "carol")
    wait_for(browser, lambda driver: "Admins only" in status_text(driver), "the refusal")
    assert browser.find_element("id", "console").is_displayed() is False
    assert browser.find_element("id", "sign-in").is_displayed() is True
    asked = service.request_lines("GET", "/admin/users/carol/sessions")
    assert [(line["status"], line["user"]) for line in asked] == [(403, "carol")]
    # the page revoked the refresh token it had been given, and nothing was left behind
    assert service.request_lines("DELETE", "/token/<redacted>")[-1]["status"] == 204
    assert browser.get_cookies() == []
    assert browser.execute_script("return [localStorage.length, sessionStorage.length]") == [0, 0]
    carol = service.log_in("carol", "curl")
    answer = requests.get(
        f"{service.url}/admin/users/bob/sessions",
        headers={"Authorization": f"Bearer {carol['accessToken']}"},
        timeout=15,
    )
    assert (answer.status_code, answer.json()) == (403, {"message": "No access"})
    assert csp_errors(browser) == []


def test_the_csp_error_check_sees_an_inline_script_the_policy_refuses(browser, service):
    """The control of the checks above: an error of the policy does reach the console."""
    browser.get(f"{service.url}/admin/")
    csp_errors(browser)
    browser.execute_script(
        "const inline = document.createElement('script');"
        "inline.textContent = 'window.inlineRan = true';"
        "document.body.append(inline);"
    )
    assert browser.execute_script("return window.inlineRan") is None
    assert len(csp_errors(browser)) == 1


#: Installed in the page: the service's answers to token renewals, revocations and the
#: admin API replaced by the status of ``window.refuse`` (with Retry-After: 1), until
#: ``window.refuse`` is unset; the page's code looks ``fetch`` up at each call.
REFUSING_FETCH = """
window.realFetch = window.realFetch || window.fetch;
window.fetch = (url, options = {}) => {
  const method = options.method || "GET";
  const path = new URL(url, location.href).pathname;
  const refused = window.refuse && (
    (method === "POST" && path.endsWith("/token")) ||
    (method === "DELETE" && path.includes("/token/")) ||
    path.includes("/admin/users/"));
  if (!refused) {
    return window.realFetch(url, options);
  }
  const status = path.includes("/admin/users/") ? 401 : window.refuse;
  return Promise.resolve(new Response('{"message":"busy"}',
    { status, headers: { "Retry-After": "1", "Content-Type": "application/json" } }));
};
"""


@pytest.mark.parametrize("busy", [429, 503])
def test_a_busy_service_neither_signs_the_page_out_nor_leaves_its_token_alive(
    browser, service, busy
):
    sign_in(browser, service, "admin")
    assert browser.find_element("id", "console").is_displayed() is True
    browser.execute_script(REFUSING_FETCH + f"window.refuse = {busy};")

    # a renewal refused for now (the API's 401 asks for one) keeps the sign-in
    show = browser.find_element("css selector", "#find button[type=submit]")
    show.click()
    wait_for(browser, lambda driver: "Could not renew" in status_text(driver), "the refusal")
    assert f"HTTP {busy}" in status_text(browser)
    assert browser.find_element("id", "console").is_displayed() is True

    # signing out while revocation is refused keeps the page signed in, to try again
    browser.find_element("id", "sign-out").click()
    wait_for(browser, lambda driver: "Could not sign out" in status_text(driver), "the refusal")
    assert browser.find_element("id", "console").is_displayed() is True

    # the service answers again: the renewal is tried again by itself, then the sign-out
    revoked = len(service.request_lines("DELETE", "/token/<redacted>"))
    browser.execute_script("window.refuse = 0;")
    browser.find_element("id", "sign-out").click()
    wait_for(browser, lambda driver: status_text(driver) == "Signed out.", "the sign-out")
    assert browser.find_element("id", "console").is_displayed() is False
    wait_until(
        lambda: (
            [line["status"] for line in service.request_lines("DELETE", "/token/<redacted>")][
                revoked:
            ]
            == [204]
        ),
        STEP_TIMEOUT,
        "the revocation of the page's refresh token",
    )
