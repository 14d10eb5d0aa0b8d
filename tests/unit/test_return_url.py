"""The URL a login returns to: a path here, or a URL on an allowed host; nothing else."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.oidc.return_url import MAX_RETURN_URL_LENGTH, checked_return_url, host_allowed

ALLOWED = ("app.example.com", ".apps.example.org")
#: What a browser reads as a URL on an allowed host, written independently of the code:
#: http(s), an allowed host (or a subdomain of .apps.example.org), a port, then a path
#: that starts with one slash, a query or a fragment; printable ASCII, no backslash.
SAFE_ABSOLUTE = re.compile(
    r"(?i:https?)://(?i:app\.example\.com|[a-z0-9.-]+\.apps\.example\.org)(:[0-9]+)?"
    r"(/(?![/\\])[!-\[\]-~]*|[?#][!-\[\]-~]*)?"
)
SAFE_PATH = re.compile(r"/(?![/\\])[!-\[\]-~]*")


@pytest.mark.parametrize(
    "url",
    [
        "/",
        "/reports?month=11&year=2026",
        "/a/b#section",
        "https://app.example.com",
        "https://app.example.com/reports?x=1&y=2",
        "HTTPS://APP.EXAMPLE.COM/x",
        "http://app.example.com:8443/x",
        "https://one.apps.example.org/",
        "https://a.b.apps.example.org?q=https://evil.test",
        "https://app.example.com/next?to=%2F%2Fevil.test",  # the query is the page's own
    ],
)
def test_a_path_here_or_a_url_on_an_allowed_host_is_kept(url):
    assert checked_return_url(url, ALLOWED) == url


@pytest.mark.parametrize(
    "url",
    [
        None,
        "",
        "https://evil.test/",  # another host
        "https://app.example.com.evil.test/",
        "https://evilapp.example.com/",
        "https://apps.example.org/",  # .apps.example.org is its subdomains only
        "https://xapps.example.org/",
        "//evil.test/",  # scheme-relative
        "///evil.test/",
        "/\\evil.test/",  # a backslash is a slash to browsers
        "\\\\evil.test",
        "https:\\\\evil.test",
        "https://app.example.com\\@evil.test/",
        "https:evil.test",  # no authority: browsers read evil.test as the host
        "https:/evil.test",
        "https://app.example.com@evil.test/",  # userinfo
        "https://app.example.com:443@evil.test/",
        "https://user:pass@app.example.com/",
        "/%2f%2fevil.test",  # encoded slashes, once and twice
        "/%2F%2Fevil.test",
        "/%252f%252fevil.test",
        "/%5cevil.test",
        "/%5C%5Cevil.test",
        "/..//evil.test",  # dot segments climb to //evil.test
        "/./%2e%2e//evil.test",
        "https://evil.test%2eapp.example.com/",  # percent in the host
        "https://app%2eexample.com/",
        "/\tx",  # a tab or a newline, which browsers drop from a URL
        "/\t/evil.test",
        "/\n/evil.test",
        "/\r\n/evil.test",
        " https://app.example.com/",
        "https://app.example.com/\x00",
        "/caf\u00e9",  # not ASCII
        "https://app.example.com\u3002evil.test/",  # an ideographic full stop
        "javascript:alert(1)",
        "JavaScript://app.example.com/%0aalert(1)",
        "data:text/html,<script>alert(1)</script>",
        "ftp://app.example.com/",
        "app.example.com/x",
        "evil.test",
        "https://[::1]/",
        "/" + "a" * MAX_RETURN_URL_LENGTH,
    ],
)
def test_any_other_url_is_refused(url):
    assert checked_return_url(url, ALLOWED) is None


def test_with_no_allowed_host_only_a_path_here_is_kept():
    assert checked_return_url("/x", ()) == "/x"
    assert checked_return_url("https://app.example.com/x", ()) is None


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("app.example.com", True),
        ("a.apps.example.org", True),
        ("apps.example.org", False),
        ("app.example.com.", False),
        ("example.com", False),
    ],
)
def test_host_allowed(host, allowed):
    assert host_allowed(host, ALLOWED) is allowed


#: Pieces of URLs, hostile and not, that Hypothesis strings together.
PIECES = [
    "/", "//", "\\", "/\\", "\\/", "http:", "https:", "HTTPS:", "javascript:", "://",
    "app.example.com", "a.apps.example.org", "apps.example.org", "evil.test", ".", "..",
    "@", ":", ":443", "%2f", "%2F", "%5c", "%25", "%2e", "%00", "?", "#", "&", "=",
    "\t", "\n", "\r", " ", "\x00", "\u3002", "\uff0e", "x",
]  # fmt: skip


@settings(max_examples=1000)
@given(st.lists(st.sampled_from(PIECES), max_size=10).map("".join) | st.text(max_size=40))
def test_a_kept_url_never_leads_to_a_host_that_is_not_allowed(url):
    kept = checked_return_url(url, ALLOWED)
    assert kept is None or kept == url
    if kept is not None:
        assert SAFE_PATH.fullmatch(kept) or SAFE_ABSOLUTE.fullmatch(kept), kept
