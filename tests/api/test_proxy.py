"""TRUSTED_PROXIES: X-Forwarded-* believed only from the proxies' own addresses."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterator
from urllib.parse import parse_qsl, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.config.parsers import ConfigError
from app.config.settings import Settings
from app.http.proxy import (
    FORWARDED_KEY,
    TrustedProxies,
    UntrustedForwarding,
    everyone_trusted_warning,
    parse_address,
)
from tests.helpers.hostile_provider import CLIENT_ID, CLIENT_SECRET, HostileProvider

pytestmark = pytest.mark.store("sqlite")  # no store is involved

NGINX = "127.0.0.1"
PROXIES = tuple(ipaddress.ip_network(item) for item in ("127.0.0.1/32", "::1", "10.0.0.0/8"))


def seen(middleware_of, peer: str, **headers: str) -> dict:
    """Return the environ the app behind the middleware sees for a request from ``peer``."""
    seen: dict = {}

    def app(environ, start_response):
        seen.update(environ)
        return []

    environ = {
        "REMOTE_ADDR": peer,
        "wsgi.url_scheme": "http",
        "HTTP_HOST": "service:8080",
        "SERVER_NAME": "service",
        "SERVER_PORT": "8080",
        "SCRIPT_NAME": "",
    }
    environ.update({"HTTP_" + name.upper(): value for name, value in headers.items()})
    middleware_of(app)(environ, None)
    return seen


def trusted(app, prefix: bool = False):
    return TrustedProxies(app, PROXIES, prefix=prefix)


@pytest.mark.parametrize(
    ("forwarded_for", "client"),
    [
        ("203.0.113.9", "203.0.113.9"),
        (" 203.0.113.9 ", "203.0.113.9"),
        ("198.51.100.1, 203.0.113.9", "203.0.113.9"),  # the nearest untrusted one
        ("203.0.113.9, 10.1.2.3", "203.0.113.9"),  # trusted hops skipped from the right
        ("203.0.113.9,10.1.2.3, 127.0.0.1", "203.0.113.9"),
        ("::ffff:203.0.113.9", "203.0.113.9"),
        ("2001:DB8:0:0::1", "2001:db8::1"),
        ("127.0.0.1", "127.0.0.1"),  # all trusted: the farthest hop, still marked forwarded
        ("10.9.9.9, 127.0.0.1", "10.9.9.9"),
        # not an address: never the client; the request is the last trusted hop's
        ("nobody", NGINX),
        ("203.0.113.9, nobody", NGINX),
        ("203.0.113.9, nobody, 10.1.2.3", "10.1.2.3"),
        ("nobody, 203.0.113.9", "203.0.113.9"),  # the untrusted client comes first
        ("1.2.3.4:80", NGINX),
        ("[2001:db8::1]", NGINX),
        ("fe80::1%eth0", NGINX),
        ("203.0.113.9 x", NGINX),
        ("203.0.113.9,", NGINX),
        ("127.000.000.001", NGINX),
    ],
)
def test_the_client_is_the_first_untrusted_address_from_the_right(forwarded_for, client):
    environ = seen(trusted, NGINX, x_forwarded_for=forwarded_for)
    assert environ["REMOTE_ADDR"] == client
    assert environ[FORWARDED_KEY] is True


@pytest.mark.parametrize("peer", ["203.0.113.50", "127.0.0.2", "::ffff:10.0.0.1x", ""])
def test_an_untrusted_peer_is_the_client_whatever_it_forwards(peer):
    environ = seen(
        trusted,
        peer,
        x_forwarded_for="127.0.0.1",
        x_forwarded_proto="https",
        x_forwarded_host="evil.example",
        x_forwarded_port="443",
        x_forwarded_prefix="/evil",
    )
    assert environ["REMOTE_ADDR"] == peer
    assert FORWARDED_KEY not in environ
    assert (environ["wsgi.url_scheme"], environ["HTTP_HOST"], environ["SCRIPT_NAME"]) == (
        "http",
        "service:8080",
        "",
    )
    assert (environ["SERVER_NAME"], environ["SERVER_PORT"]) == ("service", "8080")


def test_a_trusted_peer_without_forwarded_for_is_itself_and_not_marked():
    environ = seen(trusted, "::ffff:127.0.0.1")
    assert environ["REMOTE_ADDR"] == "127.0.0.1"  # canonical, as the limiter counts it
    assert FORWARDED_KEY not in environ


def test_two_forwarded_for_headers_joined_by_the_server_are_one_list():
    # WSGI servers join repeated headers with a comma: both lists are walked as one
    environ = seen(trusted, NGINX, x_forwarded_for="203.0.113.1, 203.0.113.2,10.0.0.1")
    assert environ["REMOTE_ADDR"] == "203.0.113.2"


def test_a_trusted_proxy_sets_scheme_host_and_port_with_its_last_value():
    environ = seen(
        trusted,
        NGINX,
        x_forwarded_proto="http, HTTPS",
        x_forwarded_host="evil.example, auth.example.com",
        x_forwarded_port="1, 8443",
    )
    assert environ["wsgi.url_scheme"] == "https"
    assert environ["HTTP_HOST"] == "auth.example.com:8443"
    assert (environ["SERVER_NAME"], environ["SERVER_PORT"]) == ("auth.example.com", "8443")


def test_a_scheme_or_port_that_is_neither_is_ignored():
    environ = seen(trusted, NGINX, x_forwarded_proto="gopher", x_forwarded_port="443x")
    assert (environ["wsgi.url_scheme"], environ["HTTP_HOST"]) == ("http", "service:8080")


@pytest.mark.parametrize(("prefix", "script_name"), [(False, ""), (True, "/auth")])
def test_the_prefix_is_believed_only_when_trusted_proxy_prefix_says_so(prefix, script_name):
    environ = seen(lambda app: trusted(app, prefix), NGINX, x_forwarded_prefix="/x, /auth/")
    assert environ["SCRIPT_NAME"] == script_name


def test_with_no_trusted_proxy_nothing_is_believed():
    environ = seen(
        UntrustedForwarding,
        NGINX,
        x_forwarded_for="203.0.113.9",
        x_forwarded_proto="https",
        x_forwarded_prefix="/evil",
    )
    assert (environ["REMOTE_ADDR"], environ["wsgi.url_scheme"], environ["SCRIPT_NAME"]) == (
        NGINX,
        "http",
        "",
    )
    assert FORWARDED_KEY not in environ


def redirect_uri(location: str) -> str:
    return dict(parse_qsl(urlsplit(location).query))["redirect_uri"]


@pytest.fixture
def provider() -> Iterator[HostileProvider]:
    provider = HostileProvider()
    yield provider
    provider.stop()


@pytest.mark.parametrize(
    ("settings", "callback"),
    [
        ({}, "http://localhost/auth/corp/callback"),
        (
            {"TRUSTED_PROXIES": NGINX, "OPEN_LOGIN": "true"},
            "https://auth.example.com/auth/corp/callback",
        ),
        (
            {"TRUSTED_PROXIES": NGINX, "OPEN_LOGIN": "true", "TRUSTED_PROXY_PREFIX": "true"},
            "https://auth.example.com/sub/auth/corp/callback",
        ),
    ],
)
def test_the_login_redirect_uri_takes_a_prefix_only_when_told_to(
    make_app, provider, settings, callback
):
    client = make_app(
        OIDC_PROVIDERS="corp",
        OIDC_CORP_ISSUER=provider.issuer,
        OIDC_CORP_CLIENT_ID=CLIENT_ID,
        OIDC_CORP_CLIENT_SECRET=CLIENT_SECRET,
        **settings,
    ).test_client()
    headers = {
        "X-Forwarded-Prefix": "/sub",
        "X-Forwarded-Proto": "https",
        "X-Forwarded-Host": "auth.example.com",
    }
    response = client.get("/auth/corp/login", headers=headers)
    assert response.status_code == 302
    assert redirect_uri(response.headers["Location"]) == callback


def proxy_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "app.http.proxy"]


def test_a_local_proxy_that_is_not_trusted_is_warned_of_once_per_process(make_app, caplog):
    client = make_app().test_client()
    caplog.set_level(logging.WARNING)
    for address in ("203.0.113.5", "127.0.0.1", "::1", "127.0.0.1"):
        client.get(
            "/healthz",
            headers={"X-Forwarded-For": "203.0.113.9"},
            environ_base={"REMOTE_ADDR": address},
        )
    assert proxy_warnings(caplog) == [
        "a request from 127.0.0.1 carries X-Forwarded-For, but TRUSTED_PROXIES is empty:"
        " every client behind that proxy counts as 127.0.0.1 (one rate limit for all, one"
        " address in the log); list the proxy's addresses in TRUSTED_PROXIES"
        " (e.g. 127.0.0.1/32,::1)"
    ]


@pytest.mark.parametrize(
    ("headers", "address"),
    [({}, "127.0.0.1"), ({"X-Forwarded-For": "1.2.3.4"}, "203.0.113.5")],
)
def test_no_warning_without_forwarded_for_from_loopback(make_app, caplog, headers, address):
    client = make_app().test_client()
    caplog.set_level(logging.WARNING)
    client.get("/healthz", headers=headers, environ_base={"REMOTE_ADDR": address})
    assert proxy_warnings(caplog) == []


def test_a_trusted_proxy_is_never_warned_of(make_app, caplog):
    client = make_app(TRUSTED_PROXIES="127.0.0.1/32", OPEN_LOGIN="true").test_client()
    caplog.set_level(logging.WARNING)
    client.get("/healthz", headers={"X-Forwarded-For": "203.0.113.9"})
    assert proxy_warnings(caplog) == []


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("192.0.2.1", "192.0.2.1"),
        ("::ffff:192.0.2.1", "192.0.2.1"),
        ("0:0:0:0:0:0:0:1", "::1"),
        ("::1", "::1"),
        ("", None),
        ("fe80::1%25eth0", None),
        ("localhost", None),
        ("192.0.2.1/32", None),
    ],
)
def test_addresses_are_parsed_to_their_canonical_form(text, address):
    parsed = parse_address(text)
    assert (None if parsed is None else str(parsed)) == address


# --- TRUSTED_PROXIES as written: mapped spellings, zone ids, everyone ------------------


def mapped_spellings(address: ipaddress.IPv4Address) -> list[str]:
    """Return ways to write ``address`` as an IPv4-mapped IPv6 address."""
    high, low = divmod(int(address), 1 << 16)
    return [
        f"::ffff:{address}",
        f"::FFFF:{address}",
        f"0:0:0:0:0:ffff:{address}",
        f"::ffff:{high:x}:{low:x}",
        f"0000:0000:0000:0000:0000:FFFF:{high:04X}:{low:04X}",
    ]


@given(
    st.builds(ipaddress.IPv4Address, st.integers(0, 2**32 - 1)),
    st.integers(0, 32),
    st.integers(0, 4),
    st.integers(0, 2**32 - 1),
)
def test_an_ipv4_mapped_proxy_is_trusted_as_its_ipv4_network(address, length, spelling, offset):
    network = ipaddress.IPv4Network((address, length), strict=False)
    written = f"{mapped_spellings(network.network_address)[spelling]}/{96 + length}"
    settings = Settings.load({"TRUSTED_PROXIES": written, "OPEN_LOGIN": "true"}, environ={})
    assert settings.trusted_proxies == (network,)
    # a peer in the network, as gunicorn gives it (IPv4): its header is believed
    peer = str(network.network_address + offset % network.num_addresses)
    middleware = lambda app: TrustedProxies(app, settings.trusted_proxies)  # noqa: E731
    environ = seen(middleware, peer, x_forwarded_for="203.0.113.9")
    assert environ["REMOTE_ADDR"] == "203.0.113.9"


@pytest.mark.parametrize("entry", ["fe80::1%eth0", "fe80::%eth0/64", "fe80::1%25eth0", "::1%1"])
@pytest.mark.parametrize("name", ["TRUSTED_PROXIES", "RATE_LIMIT_EXEMPT", "METRICS_ALLOW"])
def test_a_network_with_a_zone_id_is_refused_in_one_line(name, entry):
    with pytest.raises(ConfigError) as raised:
        Settings.load({name: f"127.0.0.1/32, {entry}"}, environ={})
    zone = entry[entry.index("%") :]
    assert str(raised.value) == (
        f"{name}: {entry!r} has a zone id ({zone.split('/')[0]}), which no client's address"
        " carries, so it would never match; give the address without it"
    )


@pytest.mark.parametrize(
    ("value", "everyone"),
    [
        ("0.0.0.0/0", "0.0.0.0/0"),
        ("127.0.0.1/32, ::/0", "::/0"),
        ("::ffff:0.0.0.0/96", "0.0.0.0/0"),
        ("0.0.0.0/0,::/0", "0.0.0.0/0, ::/0"),
        ("127.0.0.1/32, ::1, 10.0.0.0/8", None),
        ("0.0.0.0/1, 128.0.0.0/1", None),
    ],
)
def test_a_trusted_network_of_every_address_is_accepted_and_warned_of(value, everyone):
    settings = Settings.load({"TRUSTED_PROXIES": value, "OPEN_LOGIN": "true"}, environ={})
    warning = everyone_trusted_warning(settings.trusted_proxies)
    if everyone is None:
        assert warning is None
    else:
        assert warning == (
            f"TRUSTED_PROXIES holds {everyone}, which trusts every address: any client can"
            " name any address in X-Forwarded-For, and escape its rate limit; list only the"
            " proxies' own addresses (e.g. 127.0.0.1/32,::1 for nginx on this host)"
        )
