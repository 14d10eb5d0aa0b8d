"""Forwarded headers, believed only from the reverse proxies of TRUSTED_PROXIES.

``TrustedProxies`` finds the client's address as nginx's ``real_ip_recursive`` does:
only when the peer is a trusted proxy, ``X-Forwarded-For`` is read from the right,
skipping trusted addresses; the first other one is the client. An entry that is not
an IP address is never a client: the request then counts as the last trusted hop's.
Either way the environ is marked (``FORWARDED_KEY``), so that an address taken from a
header is never exempt from a rate limit. ``REMOTE_ADDR`` only ever holds an IP
address in its canonical form (``::ffff:192.0.2.1`` is ``192.0.2.1``), safe to log.

With no proxy trusted, ``UntrustedForwarding`` believes nothing and warns once per
process when a loopback peer sends ``X-Forwarded-For``: a proxy on this host that
is not listed makes every client count as the proxy.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
from collections.abc import Callable, Iterable
from typing import Any

from app.config.parsers import IPNetwork

#: Set (to True) in the environ of a request whose client address came from a header.
FORWARDED_KEY = "token_service.forwarded"
#: Distinct addresses whose parse each process remembers.
ADDRESSES_CACHED = 4096
#: Set (to True) in the environ of a request whose peer is a trusted proxy: the gateway
#: believes the original request's method, host and URI from it only.
TRUSTED_PEER_KEY = "token_service.trusted_peer"
#: The environ key of the Host header as the trusted proxy sent it, before X-Forwarded-Host
#: replaced it: Envoy names the original request's host there, and routes by it.
SENT_HOST_KEY = "token_service.sent_host"
#: The schemes X-Forwarded-Proto may set.
SCHEMES = frozenset({"http", "https"})

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=ADDRESSES_CACHED)
def parse_address(text: str) -> IPAddress | None:
    """Return ``text`` as an IP address (IPv4-mapped IPv6 as IPv4), or None if it is not one."""
    if "%" in text:  # an IPv6 scope id is any text at all: never a client's address
        return None
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if address.version == 6 and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@functools.lru_cache(maxsize=ADDRESSES_CACHED)
def canonical_address(text: str) -> str | None:
    """Return ``text`` as an IP address in its canonical form, or None if it is not one."""
    address = parse_address(text)
    return None if address is None else str(address)


def last_value(header: str) -> str:
    """Return the last of a header's comma-separated values: the nearest proxy's."""
    return header.rsplit(",", 1)[-1].strip()


class TrustedProxies:
    """WSGI middleware applying X-Forwarded-* of requests whose peer is a trusted proxy."""

    def __init__(
        self, app: WSGIApp, proxies: tuple[IPNetwork, ...], *, prefix: bool = False
    ) -> None:
        self.app = app
        self.proxies = proxies
        #: Whether X-Forwarded-Prefix is believed (TRUSTED_PROXY_PREFIX).
        self.prefix = prefix
        self.is_trusted = functools.lru_cache(maxsize=ADDRESSES_CACHED)(self._is_trusted)

    def _is_trusted(self, text: str) -> bool:
        address = parse_address(text)
        return address is not None and any(address in network for network in self.proxies)

    def client(self, peer: str, forwarded_for: str) -> str:
        """Return the client's address: the first untrusted one, from the right."""
        client = peer
        for entry in reversed(forwarded_for.split(",")):
            address = canonical_address(entry.strip())
            if address is None:
                break  # not an address: the request is the last trusted hop's
            client = address
            if not self.is_trusted(client):
                break
        return client

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        peer = environ.get("REMOTE_ADDR")
        if peer and self.is_trusted(peer):
            self.apply(environ, peer)
        return self.app(environ, start_response)

    def apply(self, environ: dict[str, Any], peer: str) -> None:
        """Rewrite ``environ`` from the headers a trusted proxy sent."""
        # canonical, as the limiter counts it (a trusted peer is an address)
        environ["REMOTE_ADDR"] = peer = canonical_address(peer) or peer
        environ[TRUSTED_PEER_KEY] = True
        forwarded_for = environ.get("HTTP_X_FORWARDED_FOR")
        if forwarded_for:
            environ["REMOTE_ADDR"] = self.client(peer, forwarded_for)
            environ[FORWARDED_KEY] = True
        proto = environ.get("HTTP_X_FORWARDED_PROTO")
        if proto and (scheme := last_value(proto).lower()) in SCHEMES:
            environ["wsgi.url_scheme"] = scheme
        environ[SENT_HOST_KEY] = environ.get("HTTP_HOST")
        host = environ.get("HTTP_X_FORWARDED_HOST")
        if host and (host := last_value(host)):
            environ["HTTP_HOST"] = environ["SERVER_NAME"] = host
            if ":" in host and not host.endswith("]"):  # a port, not the end of an IPv6 address
                environ["SERVER_NAME"], environ["SERVER_PORT"] = host.rsplit(":", 1)
        port = environ.get("HTTP_X_FORWARDED_PORT")
        if port and (port := last_value(port)).isdigit():
            host = environ.get("HTTP_HOST")
            if host:
                if ":" in host and not host.endswith("]"):
                    host = host.rsplit(":", 1)[0]
                environ["HTTP_HOST"] = f"{host}:{port}"
            environ["SERVER_PORT"] = port
        if self.prefix:
            prefix = environ.get("HTTP_X_FORWARDED_PREFIX")
            if prefix and (prefix := last_value(prefix).rstrip("/")):
                environ["SCRIPT_NAME"] = prefix


class UntrustedForwarding:
    """WSGI middleware for no trusted proxy: believe nothing, warn once of a local proxy."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app
        self.warned = False

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if "HTTP_X_FORWARDED_FOR" in environ and not self.warned:
            self.check(environ.get("REMOTE_ADDR") or "")
        return self.app(environ, start_response)

    def check(self, peer: str) -> None:
        """Warn, once, when a proxy on this host forwards to a service that trusts none."""
        address = parse_address(peer)
        if address is None or not address.is_loopback:
            return
        self.warned = True
        logger.warning(
            "a request from %s carries X-Forwarded-For, but TRUSTED_PROXIES is empty: every"
            " client behind that proxy counts as %s (one rate limit for all, one address in"
            " the log); list the proxy's addresses in TRUSTED_PROXIES (e.g. 127.0.0.1/32,::1)",
            address,
            address,
        )


def everyone_trusted_warning(proxies: tuple[IPNetwork, ...]) -> str | None:
    """Return the start-up warning for trusted networks that hold every address, or None."""
    everyone = [str(network) for network in proxies if network.prefixlen == 0]
    if not everyone:
        return None
    return (
        f"TRUSTED_PROXIES holds {', '.join(everyone)}, which trusts every address: any"
        " client can name any address in X-Forwarded-For, and escape its rate limit; list"
        " only the proxies' own addresses (e.g. 127.0.0.1/32,::1 for nginx on this host)"
    )


def wrap_forwarded_headers(app: WSGIApp, proxies: tuple[IPNetwork, ...], prefix: bool) -> WSGIApp:
    """Return ``app`` wrapped in the middleware for the trusted proxies (or for none)."""
    if proxies:
        return TrustedProxies(app, proxies, prefix=prefix)
    return UntrustedForwarding(app)
