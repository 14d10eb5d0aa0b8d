"""``GET /auth/check``: nginx's ``auth_request`` asks whether a request may pass, and whose it is.

200 with no body and the caller in oauth2-proxy's ``X-Auth-Request-*`` headers; the
401 and 403 of the protected endpoints; 400, with a warning in the log, for a query
other than none, ``role=user`` or ``role=admin``: nginx turns it into an error for the
client, so a typo in its config is loud, never an open door. The check reads no body
and writes no store (a cookie token's deny-list entry is read). With
AUTH_CHECK_CACHE_SECONDS, a Bearer token's 200 tells nginx how long it may keep it
(``X-Accel-Expires``). docs/gateway.md is the nginx side.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from flask import Blueprint, Response, current_app, request
from werkzeug.exceptions import BadRequest

from app.auth.tokens import ROLES
from app.config.settings import Settings
from app.events import Reason
from app.extensions import current_settings, get_clock
from app.http.errors import forbidden_response, render_http_error, unauthenticated_response
from app.http.guards import role_allows, verified_bearer_claims, verified_cookie_user
from app.http.request_log import note
from app.oidc.cross_site import is_cross_site

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment
    from werkzeug.datastructures import Headers

bp = Blueprint("gateway", __name__)

#: The query strings of the shipped nginx snippets, to the roles they require.
KNOWN_QUERIES: dict[str, tuple[str, ...]] = {
    "": (),
    "role=user": ("user",),
    "role=admin": ("admin",),
}
#: What a 400 says; the query itself goes to the log only.
BAD_QUERY = "the check takes no query, role=user or role=admin"
#: Longest piece of a bad query the warning quotes.
MAX_LOGGED_QUERY = 200
#: Methods for which a request from a sibling host of the same site may use the cookie.
SAFE_METHODS = frozenset({"GET", "HEAD"})
#: The header the shipped nginx snippet names the client's own method in (the check is a GET).
ORIGINAL_METHOD = "HTTP_X_ORIGINAL_METHOD"
#: Every answer of the check, whatever nginx may cache elsewhere.
NO_STORE = ("Cache-Control", "no-store")
#: Identities whose headers are kept per process (a few hundred bytes each).
IDENTITY_CACHE_SIZE = 1024


class _Bodiless(Response):
    """An answer with no body, hence no Content-Type, and nothing for werkzeug to fix up."""

    default_mimetype = None

    def get_wsgi_headers(self, environ: WSGIEnvironment) -> Headers:
        # werkzeug's copies the headers to resolve a Location and to count the body:
        # this answer has no Location, and set_data already wrote its Content-Length
        return self.headers


@bp.get("/auth/check")
def auth_check() -> Response:
    """Answer 200 with the caller's identity in headers, 401, 403, or 400 for a bad query."""
    query: str = request.environ.get("QUERY_STRING", "")
    required = KNOWN_QUERIES.get(query)
    if required is None:
        required = _parsed_roles()
        if required is None:
            return _bad_query(query)
    settings = current_settings()
    if "HTTP_AUTHORIZATION" not in request.environ and settings.auth_check_cookie:
        return _cookie_check(required, settings.auth_check_cache_seconds)
    claims, reason = verified_bearer_claims()
    if claims is None:
        note(reason=reason)
        return _refused(unauthenticated_response())
    username, expires_at = claims["username"], claims["exp"]
    if not role_allows(claims["role"], required):
        note(user=username, reason=Reason.WRONG_ROLE)
        return _refused(forbidden_response())
    note(user=username)
    response = _Bodiless(b"", 200, _identity_headers(username, claims["role"], expires_at))
    if settings.auth_check_cache_seconds:
        response.headers.add("X-Accel-Expires", cache_until(expires_at, settings))
    return response


def cache_until(expires_at: int, settings: Settings) -> str:
    """Return the X-Accel-Expires of a Bearer token's 200: nginx may keep it up to the
    second before the token's ``exp`` (nginx serves an entry through the second it names),
    and AUTH_CHECK_CACHE_SECONDS at most."""
    clock = get_clock()
    now = int(clock())
    return f"@{min(expires_at - 1, now + settings.auth_check_cache_seconds)}"


@functools.lru_cache(maxsize=IDENTITY_CACHE_SIZE)
def _identity_headers(username: str, role: str, expires_at: int) -> tuple[tuple[str, str], ...]:
    """Return the 200's headers for a Bearer token's claims (kept: a client sends its
    token again and again, as for the verified-token cache of app/auth/tokens.py)."""
    return (
        ("X-Auth-Request-User", header_text(username)),
        ("X-Auth-Request-Groups", role),
        ("X-Auth-Request-Expires", str(expires_at)),
        NO_STORE,
    )


def header_text(value: str) -> str:
    """Return ``value`` fit for an HTTP header: its UTF-8 percent-encoded (RFC 3986), but
    for letters, digits and ``-._~@``; a lone surrogate is encoded as its three bytes."""
    return quote(value, safe="@", errors="surrogatepass")


def cookie_identity(user: dict[str, str]) -> str | None:
    """Return the X-Auth-Request-User of a cookie token's user: ``<source>:<id>``, or None
    when the token names no id.

    Each part is ``header_text``, which writes a ``:`` as ``%3A``: the one bare ``:`` is
    the separator, and a local username (a Bearer token's, never namespaced) has none, so
    no provider's user can pass for a local one, nor one provider's for another's. A
    missing source is written as an empty one.
    """
    if "id" not in user:
        return None
    return f"{header_text(user.get('source', ''))}:{header_text(user['id'])}"


def _parsed_roles() -> tuple[str, ...] | None:
    """Return the role a query spelled otherwise names (``role=%61dmin``), or None."""
    arguments = request.args
    roles = arguments.getlist("role")
    if len(arguments) == 1 and len(roles) == 1 and roles[0] in ROLES:
        return (roles[0],)
    return None


def _bad_query(query: str) -> Response:
    shown = query[:MAX_LOGGED_QUERY]
    current_app.logger.warning(
        "GET /auth/check: unknown query %r: the nginx gateway's auth location must ask"
        " with no query, role=user or role=admin (deploy/nginx/)",
        shown,
    )
    response = render_http_error(BadRequest(BAD_QUERY))
    response.headers.set(*NO_STORE)
    return response  # type: ignore[return-value]  # a Flask response, from jsonify


def _cookie_check(required: tuple[str, ...], cache_seconds: int) -> Response:
    """Check the third-party login's cookie token (AUTH_CHECK_COOKIE), same-site requests only."""
    method = request.environ.get(ORIGINAL_METHOD, "")
    if is_cross_site(navigation=method in SAFE_METHODS):
        note(reason=Reason.CROSS_SITE)
        return _refused(unauthenticated_response())
    user, expires_at, reason = verified_cookie_user()
    if user is None:
        note(reason=reason)
        return _refused(unauthenticated_response())
    if not role_allows(user.role, required):
        note(reason=Reason.WRONG_ROLE)
        return _refused(forbidden_response())
    headers: list[tuple[str, Any]] = [
        ("X-Auth-Request-Groups", user.role),
        ("X-Auth-Request-Expires", str(expires_at)),
        NO_STORE,
    ]
    identity = cookie_identity(user.profile)
    if identity is not None:
        headers.append(("X-Auth-Request-User", identity))
    for field, name in (("source", "Source"), ("shownName", "Name")):
        if field in user.profile:
            headers.append((f"X-Auth-Request-{name}", header_text(user.profile[field])))
    if user.email is not None:  # verified at the login, or never signed into the token
        headers.append(("X-Auth-Request-Email", header_text(user.email)))
    if cache_seconds:
        headers.append(("X-Accel-Expires", "0"))  # never kept: a logout counts at once
    return _Bodiless(b"", 200, headers)


def _refused(response: Response) -> Response:
    response.headers.set(*NO_STORE)
    return response
