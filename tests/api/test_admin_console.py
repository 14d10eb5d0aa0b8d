"""GET /admin/: the admin console's three files, with the headers that keep the page
closed to scripts and frames from elsewhere and out of every cache.

What the page does in a real browser is tests/system/test_admin_console.py's.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from app.views.console import CONTENT_SECURITY_POLICY, FILES, console_file
from tests.helpers.openapi import assert_documented, document_of

pytestmark = pytest.mark.store("sqlite")  # the console's files need no store

PATHS = {
    "/admin/": "index.html",
    "/admin/console.css": "console.css",
    "/admin/console.js": "console.js",
}


def directives(policy: str) -> dict[str, list[str]]:
    parsed = (part.split() for part in policy.split(";"))
    return {words[0]: words[1:] for words in parsed if words}


@pytest.mark.parametrize(("path", "name"), PATHS.items())
def test_each_file_is_served_with_its_type_and_the_console_headers(client, path, name):
    response = client.get(path)
    assert response.status_code == 200
    assert response.content_type == FILES[name]
    assert response.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert response.headers["Cache-Control"] == "no-store"
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert client.head(path).headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY


def test_the_policy_allows_no_inline_script_no_eval_no_frame_and_nothing_from_elsewhere():
    policy = directives(CONTENT_SECURITY_POLICY)
    assert policy["default-src"] == ["'none'"]
    assert policy["script-src"] == ["'self'"]  # neither 'unsafe-inline' nor 'unsafe-eval'
    assert policy["frame-ancestors"] == ["'none'"]
    assert policy["base-uri"] == ["'none'"]
    for sources in policy.values():
        assert set(sources) <= {"'self'", "'none'"}, sources


class PageParts(HTMLParser):
    """What of the page a browser would run or load."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.loaded: list[str] = []
        self.handlers: list[str] = []
        self.styles = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "script":
            self.scripts.append(attributes)
        if tag == "style" or "style" in attributes:
            self.styles += 1
        self.handlers += [name for name in attributes if name.startswith("on")]
        self.loaded += [value or "" for name, value in attrs if name in {"src", "href"}]

    def handle_data(self, data: str) -> None:
        if self.lasttag == "script" and data.strip():
            self.scripts.append({"inline": data})


def test_the_page_loads_only_its_own_two_files_and_holds_no_script_of_its_own(client):
    parts = PageParts()
    parts.feed(client.get("/admin/").get_data(as_text=True))
    assert parts.scripts == [{"src": "console.js", "defer": None}]
    assert sorted(parts.loaded) == ["console.css", "console.js"]
    assert parts.handlers == []
    assert parts.styles == 0


def test_the_script_writes_no_markup_and_keeps_no_token_outside_the_page():
    script = console_file("console.js").decode()
    for unsafe in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "Function(",
        "localStorage",
        "sessionStorage",
        "indexedDB",
        "document.cookie",
    ]:
        assert unsafe not in script, unsafe
    # every request goes to this service, by a path relative to the page
    for target in re.findall(r"fetch\(([^,)]+)", script):
        assert target.startswith("API +"), target


def test_no_other_file_of_the_console_is_served(client):
    for path in ["/admin/index.html", "/admin/__init__.py", "/admin/../admin/", "/admin/x.js"]:
        assert client.get(path).status_code == 404, path
    # the page's own path without its slash leads to it
    response = client.get("/admin")
    assert response.status_code == 308
    assert response.headers["Location"].endswith("/admin/")


def test_the_console_s_answers_are_those_the_api_document_lists(client):
    document = document_of(client)
    for path in PATHS:
        for method in ["get", "head"]:
            assert_documented(document, method, path, client.open(path, method=method))
