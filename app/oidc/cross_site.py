"""Which requests to the login start and the logout come from another site: they are refused.

A browser says where a request comes from in ``Sec-Fetch-Site`` (every current
browser) and, on a POST or a fetch, in ``Origin``. ``Sec-Fetch-Site`` decides when
it is ``same-origin`` (or, for the login start, a navigation, ``none`` or
``same-site``); otherwise ``Origin`` must name a trusted origin: the service's own
(``PUBLIC_URL``, else the request's scheme and host) or that of
``LOGIN_REDIRECT_URL``, the front end the login leads to. A request with neither
header (curl, a script) comes from no site, and passes.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from flask import request

from app.extensions import current_settings

#: Ports a browser leaves out of an origin.
DEFAULT_PORTS = {"http": 80, "https": 443}
#: ``Sec-Fetch-Site`` values a navigation to the login start may carry: typed or
#: bookmarked (``none``), or a link from a sibling host of the same site, such as the
#: front end on ``app.example.com`` linking to ``auth.example.com`` (``same-site``).
NAVIGATION_SITES = frozenset({"none", "same-site"})


def is_cross_site(*, navigation: bool = False) -> bool:
    """Return whether the request comes from a site the service does not trust.

    ``navigation``: the request is the login start, a GET the user follows from a link.
    """
    site = request.headers.get("Sec-Fetch-Site")
    if site == "same-origin" or (navigation and site in NAVIGATION_SITES):
        return False
    origin = request.headers.get("Origin")
    if origin is None:
        # a browser's cross-site or same-site request without an Origin cannot be
        # placed: refused; no header at all is no browser, so no other site's doing
        return site is not None
    return origin_of(origin) not in trusted_origins()


def trusted_origins() -> frozenset[str]:
    """Return the service's own origin and that of the front end its login leads to."""
    settings = current_settings()
    own = settings.public_url or f"{request.scheme}://{request.host}"
    urls = [own]
    if not settings.login_redirect_url.startswith("/"):
        urls.append(settings.login_redirect_url)
    return frozenset(origin for origin in map(origin_of, urls) if origin is not None)


def origin_of(url: str) -> str | None:
    """Return the origin (``scheme://host[:port]``) of ``url`` as a browser writes it, or None."""
    try:
        parts = urlsplit(url.strip())
        host, port = parts.hostname, parts.port
    except ValueError:  # a port that is no number, an unclosed [
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not host:
        return None  # "null" (a sandboxed page or a file), or no URL at all
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != DEFAULT_PORTS[scheme]:
        netloc += f":{port}"
    return f"{scheme}://{netloc}"
