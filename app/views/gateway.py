"""The gateway's check: a proxy asks whether a request may pass, and whose it is.

``GET /auth/check`` answers nginx's ``auth_request``, Traefik's ForwardAuth and Caddy's
``forward_auth``; ``/auth/ext-authz/<path>`` answers Envoy's ``ext_authz`` for the request
of its own method and of the path after the prefix. 200 with no body and the caller in
oauth2-proxy's ``X-Auth-Request-*`` headers; the 401 and 403 of the protected endpoints.
Without ACCESS_RULES_FILE the check's query names the role (none, ``role=user`` or
``role=admin``; anything else is a 400 with a warning in the log: nginx turns it into an
error for the client, so a typo in its config is loud, never an open door). With it, the
rules of ``app.gateway`` judge the original request the proxy names, believed from a peer
in TRUSTED_PROXIES only, and any query is a 400. The check reads no body and writes no
store (a cookie token's deny-list entry is read). With AUTH_CHECK_CACHE_SECONDS, a Bearer
token's 200 tells nginx how long it may keep it (``X-Accel-Expires``). docs/gateway.md is
the proxies' side.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from flask import Blueprint, Response, current_app, request
from werkzeug.exceptions import BadRequest
from werkzeug.routing import BaseConverter, Rule

from app.auth.tokens import ROLES
from app.config.settings import Settings
from app.events import Reason
from app.extensions import current_settings, get_access_rules, get_clock
from app.gateway.paths import query_methods
from app.gateway.rules import AccessRules, Judgment, Verdict
from app.http.errors import forbidden_response, render_http_error, unauthenticated_response
from app.http.guards import role_allows, verified_bearer_claims, verified_cookie_user
from app.http.proxy import SENT_HOST_KEY, TRUSTED_PEER_KEY
from app.http.request_log import note
from app.observability.redaction import redact
from app.oidc.cross_site import is_cross_site

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment
    from flask.blueprints import BlueprintSetupState
    from werkzeug.datastructures import Headers

bp = Blueprint("gateway", __name__)


class AnyPath(BaseConverter):
    """Any path text, slashes included (``path`` refuses a leading one): Envoy asks about
    ``//x`` as about any path."""

    regex = r"[\s\S]+"  # "." would stop at a newline, which %0A spells in a path
    part_isolating = False


@bp.record_once
def register_converter(state: BlueprintSetupState) -> None:
    """Give the app the converter before the routes below are added to it."""
    state.app.url_map.converters.setdefault("any_path", AnyPath)


#: The query strings of the shipped nginx snippets, to the roles they require.
KNOWN_QUERIES: dict[str, tuple[str, ...]] = {
    "": (),
    "role=user": ("user",),
    "role=admin": ("admin",),
}
#: What a 400 says; the query itself goes to the log only.
BAD_QUERY = "the check takes no query, role=user or role=admin"
#: What a 400 says to a query beside ACCESS_RULES_FILE.
RULES_QUERY = "with ACCESS_RULES_FILE the check takes no query: the rules decide"
#: What a 400 says when a trusted proxy does not name what a rule needs.
MISSING_ORIGINAL = "the proxy names no original method or URI, which the rules need"
#: Where Envoy's ext_authz (HTTP service) asks: its path_prefix.
ENVOY_PREFIX = "/auth/ext-authz"
#: The methods of Envoy's routes that the OpenAPI document lists; ``route_any_method``
#: routes every other method token there too (a 405 would be Envoy's refusal).
ANY_METHOD = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
#: Where each proxy names the original method: nginx's snippet, then Traefik's and Caddy's.
ORIGINAL_METHODS = ("HTTP_X_ORIGINAL_METHOD", "HTTP_X_FORWARDED_METHOD")
#: Headers of the original request (each proxy passes them on) by which a client names
#: another method that many frameworks take for the request's: judged too.
METHOD_OVERRIDES = (
    "HTTP_X_HTTP_METHOD_OVERRIDE",
    "HTTP_X_HTTP_METHOD",
    "HTTP_X_METHOD_OVERRIDE",
)
#: Where each proxy names the original URI (path and query, as the client sent them).
ORIGINAL_URIS = ("HTTP_X_ORIGINAL_URI", "HTTP_X_FORWARDED_URI")
#: Longest piece of a bad query the warning quotes.
MAX_LOGGED_QUERY = 200
#: Methods for which a request from a sibling host of the same site may use the cookie.
SAFE_METHODS = frozenset({"GET", "HEAD"})
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
    rules = get_access_rules()
    if rules is not None:
        if query:
            return _bad_request(
                RULES_QUERY,
                "GET /auth/check: a query %r beside ACCESS_RULES_FILE"
                " (deploy/nginx/: the rules decide, no ?role=)",
                query,
            )
        return _judged(rules.current(), ORIGINAL_METHODS, ORIGINAL_URIS)
    required = KNOWN_QUERIES.get(query)
    if required is None:
        required = _parsed_roles()
        if required is None:
            return _bad_query(query)
    return _answer(required)


# without strict_slashes, the prefix alone is answered too, not redirected to the one with /
@bp.route(f"{ENVOY_PREFIX}/", methods=ANY_METHOD, defaults={"path": ""}, strict_slashes=False)
@bp.route(f"{ENVOY_PREFIX}/<any_path:path>", methods=ANY_METHOD)
def ext_authz(path: str) -> Response:
    """Envoy's ext_authz: answer for the request named by this one's method and its path
    after the prefix, as ``/auth/check`` does; its body is never read."""
    rules = get_access_rules()
    if rules is None:
        return _answer(())
    return _judged(rules.current(), (), (), envoy=True)


@bp.record_once
def route_any_method(state: BlueprintSetupState) -> None:
    """Route every other method token to ``ext_authz`` too (PROPFIND, MKCOL, TRACE, a
    custom one), after the routes above: Envoy asks with the original request's method,
    and Flask routes only the methods it is given, so werkzeug's rules, which take any
    method when they name none, are added beside them."""
    endpoint = f"{state.name}.{ext_authz.__name__}"
    prefix = (state.url_prefix or "") + ENVOY_PREFIX
    state.app.url_map.add(
        Rule(f"{prefix}/", endpoint=endpoint, defaults={"path": ""}, strict_slashes=False)
    )
    state.app.url_map.add(Rule(f"{prefix}/<any_path:path>", endpoint=endpoint))


def _answer(required: tuple[str, ...]) -> Response:
    """Answer for a request open to the ``required`` roles (none: any authenticated user)."""
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


def _judged(
    rules: AccessRules, method_keys: tuple[str, ...], uri_keys: tuple[str, ...], envoy: bool = False
) -> Response:
    """Answer by the rules for the original request the proxy names."""
    environ = request.environ
    trusted = environ.get(TRUSTED_PEER_KEY, False)
    methods: tuple[str, ...] | None = None
    uris: tuple[str, ...] | None = None
    host = None
    if trusted:
        overrides = [environ[key] for key in METHOD_OVERRIDES if key in environ]
        if envoy:
            methods = _spellings(environ["REQUEST_METHOD"], overrides=overrides)
            uris = (_text(_envoy_uri(environ)),)
        else:
            named = (environ[key] for key in method_keys if key in environ)
            methods = _spellings(*named, overrides=overrides)
            uris = _targets(*(_text(environ[key]) for key in uri_keys if key in environ)) or None
        # Envoy routes by the Host it sends (its :authority), whatever X-Forwarded-Host says
        host = environ.get(SENT_HOST_KEY) if envoy else environ.get("HTTP_HOST")
    judgment = _strictest(rules, methods or None, host, uris)
    if trusted and judgment.unknown in {"the method", "the path"}:
        return _bad_request(
            MISSING_ORIGINAL,
            "%s: the trusted proxy %s names no original %s, which rules[%d] needs: pass it"
            " (docs/gateway.md, the protocols)",
            request.path,
            environ.get("REMOTE_ADDR"),
            judgment.unknown.removeprefix("the "),
            judgment.rule.number if judgment.rule else 0,
        )
    verdict = judgment.verdict
    if verdict is Verdict.DENY:
        note(reason=Reason.DENIED_BY_RULE)
        return _refused(forbidden_response())
    if verdict is Verdict.PUBLIC:
        headers = [NO_STORE]
        if current_settings().auth_check_cache_seconds:
            headers.append(("X-Accel-Expires", "0"))
        return _Bodiless(b"", 200, headers)
    return _answer(("admin",) if verdict is Verdict.ADMIN else ("user",))


def _strictest(
    rules: AccessRules,
    methods: tuple[str, ...] | None,
    host: str | None,
    uris: tuple[str, ...] | None,
) -> Judgment:
    """Return the strictest judgment among the URIs the proxy named (a client's own header
    of another proxy's name may come beside the proxy's)."""
    if uris is None or len(uris) == 1:
        return rules.judge(methods, host, None if uris is None else uris[0])
    return max(
        (rules.judge(methods, host, uri) for uri in uris), key=lambda judgment: judgment.verdict
    )


def _spellings(*headers: str, overrides: Sequence[str] = ()) -> tuple[str, ...]:
    """Return the methods the headers name, each of a header sent twice (joined by a comma)
    too, and those the ``overrides`` name when the headers name one; () when none does (an
    empty header names none). The rules read each as an upstream may take it
    (``method_readings``: upper-cased, a HEAD as its GET too)."""
    if len(headers) == 1 and not overrides and "," not in headers[0] and headers[0].strip():
        return headers  # the usual: one header, one method
    spelled = {piece.strip() for header in headers for piece in header.split(",")} - {""}
    if not spelled:
        return ()
    spelled |= {piece.strip() for header in overrides for piece in header.split(",")} - {""}
    return tuple(sorted(spelled))


def _text(value: str) -> str:
    """Return a WSGI string (its bytes as Latin-1 characters) as the UTF-8 text it spells,
    a byte that is no UTF-8 kept as a lone surrogate (the rules deny it)."""
    if value.isascii():
        return value
    try:
        return value.encode("latin-1").decode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # not a WSGI string: already text
        return value


def _targets(*headers: str) -> tuple[str, ...]:
    """Return the URIs the headers name: each header whole (a path may hold a comma), and
    each comma-separated piece that is a path, in case a client's header and the proxy's
    arrived joined into one."""
    targets = []
    for header in headers:
        targets.append(header)
        if "," in header:
            pieces = (piece.strip() for piece in header.split(","))
            targets += [piece for piece in pieces if piece.startswith("/")]
    return tuple(targets)


def _envoy_uri(environ: dict[str, Any]) -> str:
    """Return the original request's target: this one's after the prefix, as sent."""
    raw: str = environ.get("RAW_URI") or environ.get("REQUEST_URI") or ""
    start = environ.get("SCRIPT_NAME", "") + ENVOY_PREFIX
    if raw.startswith(start) and raw[len(start) : len(start) + 1] in {"", "/", "?"}:
        rest = raw[len(start) :]
    else:  # a prefix spelled otherwise (encoded): the decoded path, re-encoded
        path = environ.get("PATH_INFO", "")[len(ENVOY_PREFIX) :]
        rest = quote(path, safe="/;%\\", encoding="latin-1", errors="replace")
        if environ.get("QUERY_STRING"):
            rest += "?" + environ["QUERY_STRING"]
    return rest if rest.startswith("/") else "/" + rest


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


def _bad_request(message: str, warning: str, *arguments: Any) -> Response:
    """Return a loud 400: ``message`` to the proxy, ``warning`` in the log."""
    current_app.logger.warning(
        warning,
        *(
            # redacted before it is cut: a token cut in two is no longer found whole
            redact(argument)[:MAX_LOGGED_QUERY] if isinstance(argument, str) else argument
            for argument in arguments
        ),
    )
    response = render_http_error(BadRequest(message))
    response.headers.set(*NO_STORE)
    return response  # type: ignore[return-value]  # a Flask response, from jsonify


def _bad_query(query: str) -> Response:
    shown = redact(query)[:MAX_LOGGED_QUERY]  # redacted before it is cut, as above
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
    if is_cross_site(navigation=_named_safe_method()):
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


def _named_safe_method() -> bool:
    """Return whether the original request's method is a GET or HEAD: Envoy's is this
    request's own; nginx, Traefik and Caddy name it in a header (their check is a GET).
    Each header present must name one, since a client may write the other proxy's, and so
    must each method override (a navigation to ``?_method=DELETE`` is a DELETE to many
    frameworks)."""
    environ = request.environ
    if request.endpoint == "gateway.ext_authz":
        named = [environ["REQUEST_METHOD"]]
        uris = [_envoy_uri(environ)]
    else:
        named = [environ[key] for key in ORIGINAL_METHODS if key in environ]
        uris = [environ[key] for key in ORIGINAL_URIS if key in environ]
    overrides = [environ[key].strip().upper() for key in METHOD_OVERRIDES if key in environ]
    overrides += [method for uri in uris if "?" in uri for method in query_methods(uri)]
    return bool(named) and all(method in SAFE_METHODS for method in [*named, *overrides])


def _refused(response: Response) -> Response:
    response.headers.set(*NO_STORE)
    return response
