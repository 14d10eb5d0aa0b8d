"""The third-party login routes; the OpenID Connect flow is ``app/oidc/``.

``GET /auth/<provider>/login`` sends the browser to the provider;
``GET /auth/<provider>/callback`` takes its answer, sets the cookie token that
``GET /api/v1/me`` reads and sends the browser on; ``POST /auth/logout`` refuses
that token from then on and clears the cookie, with or without a provider
configured. The login start and the logout refuse another site's request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flask import Blueprint, Response, url_for
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

if TYPE_CHECKING:
    from app.oidc.flow import LoginFlow

bp = Blueprint("oauth", __name__, url_prefix=ROUTE_PREFIX)


@bp.get("/<provider>/login")
def login(provider: str) -> Response:
    """Send the browser to the provider's authorization endpoint; 403 from another site."""
    _refuse_cross_site(navigation=True)
    location = _flow_of(provider).authorization_url(provider, _callback_url(provider))
    return bodiless(302, Location=location)


@bp.get("/<provider>/callback")
def callback(provider: str) -> Response:
    """Check the provider's answer, set the cookie token, send the browser onwards."""
    user = _flow_of(provider).logged_in_user(provider)
    settings = current_settings()
    cookie_token = issue_cookie_token(
        user, get_key_ring(), settings.cookie_token_lifetime, get_clock()
    )
    response = bodiless(302, Location=settings.login_redirect_url)
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
