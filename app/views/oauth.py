"""The third-party login routes; the OpenID Connect flow is ``app/oidc/``.

``GET /auth/<provider>/login`` sends the browser to the provider;
``GET /auth/<provider>/callback`` takes its answer, sets the cookie token that
``GET /api/v1/me`` reads and sends the browser on (back to the page the login started
for, or to LOGIN_REDIRECT_URL); ``POST /auth/logout`` refuses
that token from then on and clears the cookie, with or without a provider
configured. The login start and the logout refuse another site's request.
"""

from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING, Any

from flask import Blueprint, Response, current_app, request, url_for
from werkzeug.exceptions import Forbidden, NotFound

from app.auth.tokens import issue_cookie_token
from app.config.settings import Settings
from app.events import Reason
from app.extensions import current_settings, get_clock, get_key_ring, get_login_flow
from app.http.guards import log_out_cookie_token
from app.http.request_log import note
from app.http.responses import bodiless
from app.oidc.cross_site import is_cross_site
from app.oidc.login_state import ROUTE_PREFIX
from app.oidc.return_url import checked_return_url

if TYPE_CHECKING:
    from app.oidc.flow import LoginFlow

bp = Blueprint("oauth", __name__, url_prefix=ROUTE_PREFIX)

#: Where the login start reads the URL to come back to: the query, or the header
#: oauth2-proxy reads it from, which the shipped nginx sign-in sets (deploy/nginx/).
RETURN_URL_PARAMETER = "rd"
RETURN_URL_HEADER = "X-Auth-Request-Redirect"
#: Longest piece of a refused return URL the warning quotes (never its query).
MAX_LOGGED_RETURN_URL = 200
#: What the callback answers to send the browser back to the page the login started for.
ONWARD_PAGE = (
    '<!doctype html><meta charset="utf-8"><meta name="referrer" content="no-referrer">'
    '<meta http-equiv="refresh" content="0;url=\'{url}\'">'
    '<title>Signed in</title><p>Signed in. <a href="{url}">Continue</a></p>\n'
)
#: The page runs no script, loads nothing and may not be framed or kept.
ONWARD_PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


@bp.get("/<provider>/login")
def login(provider: str) -> Response:
    """Send the browser to the provider's authorization endpoint; 403 from another site.

    The URL to come back to (``?rd=``, else ``X-Auth-Request-Redirect``) is kept if its
    host is allowed (LOGIN_RETURN_DOMAINS); any other falls back to LOGIN_REDIRECT_URL.
    """
    _refuse_cross_site(navigation=True)
    flow = _flow_of(provider)
    asked = request.args.get(RETURN_URL_PARAMETER) or request.headers.get(RETURN_URL_HEADER)
    return_url = checked_return_url(asked, current_settings().login_return_domains)
    if asked and return_url is None:
        # without its query: a page's query may hold a token of its own
        shown = re.split(r"[?#]", asked, maxsplit=1)[0][:MAX_LOGGED_RETURN_URL]
        current_app.logger.warning(
            "third-party login: return URL %r refused (neither a path here nor on a host of"
            " LOGIN_RETURN_DOMAINS): the login will end at LOGIN_REDIRECT_URL",
            shown,
        )
    location = flow.authorization_url(provider, _callback_url(provider), return_url)
    return bodiless(302, Location=location)


@bp.get("/<provider>/callback")
def callback(provider: str) -> Response:
    """Check the provider's answer, set the cookie token, send the browser onwards: back
    to the URL the login started for, or to LOGIN_REDIRECT_URL."""
    flow = _flow_of(provider)
    kept = flow.pending_return_url(provider)  # read before the login's state is spent
    user = flow.logged_in_user(provider)
    settings = current_settings()
    cookie_token = issue_cookie_token(
        user.profile,
        get_key_ring(),
        settings.cookie_token_lifetime,
        get_clock(),
        role=user.role,
        email=user.email,
    )
    # checked again: the settings of the host that finishes the login are the ones that count
    return_url = checked_return_url(kept, settings.login_return_domains)
    if return_url is None:
        response = bodiless(302, Location=settings.login_redirect_url)
    else:
        response = _onward_page(return_url)
    response.set_cookie(
        value=cookie_token, max_age=settings.cookie_token_lifetime, **_auth_cookie(settings)
    )
    return response


@bp.post("/logout")
def logout() -> Response:
    """Refuse the cookie token from now on and clear it; 204 whether or not one was set.

    403 from another site: a page elsewhere must not log the user out.
    """
    _refuse_cross_site()
    log_out_cookie_token()
    response = bodiless(204)
    response.delete_cookie(**_auth_cookie(current_settings()))
    return response


def _onward_page(url: str) -> Response:
    """Return a page of this site that sends the browser on to ``url`` itself.

    A 302 would not do: a browser marks every request of a redirect chain that passed
    through the provider's site as cross-site (``Sec-Fetch-Site``), and the gateway's
    cookie check refuses such a request. A page's refresh is this site's own request.
    """
    # the URL is printable ASCII (return_url.py); these four would end the attribute or
    # the refresh's URL early, and are written percent-encoded in a URL anyway
    for character, encoded in (("'", "%27"), ('"', "%22"), ("<", "%3C"), (">", "%3E")):
        url = url.replace(character, encoded)
    shown = html.escape(url)
    page = ONWARD_PAGE.format(url=shown)
    response = Response(page, 200, mimetype="text/html")
    response.headers.update(ONWARD_PAGE_HEADERS)
    return response


def _refuse_cross_site(*, navigation: bool = False) -> None:
    """Answer 403 (``{"message": "No access"}``, the one 403 body) to another site's request."""
    if is_cross_site(navigation=navigation):
        note(reason=Reason.CROSS_SITE)
        raise Forbidden()


def _flow_of(provider: str) -> LoginFlow:
    flow = get_login_flow()
    if flow is None or provider not in flow.clients:
        raise NotFound("unknown identity provider")
    return flow


def _auth_cookie(settings: Settings) -> dict[str, Any]:
    """Return the cookie token's name and attributes, the same to set and to clear it."""
    return {
        "key": settings.auth_cookie_name,
        "path": "/",
        "secure": settings.auth_cookie_secure,
        "httponly": True,
        "samesite": "Lax",
    }


def _callback_url(provider: str) -> str:
    public_url = current_settings().public_url
    if public_url:
        return public_url + url_for("oauth.callback", provider=provider)
    return url_for("oauth.callback", provider=provider, _external=True)
