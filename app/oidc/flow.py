"""The two legs of a login: to the provider, and back with a code for the user it names.

State, nonce and PKCE verifier ride in the login-state cookie
(``login_state.py``) for the few seconds of the round trip, so any worker or host
can finish a login.
"""

from __future__ import annotations

from typing import Any

import requests
from authlib.common.errors import AuthlibBaseError
from flask import current_app, request, session
from joserfc.errors import JoseError
from werkzeug.exceptions import BadRequest

from app.auth.tokens import CookieUser
from app.compat.authlib import forget_old_pending_logins, pending_login_key
from app.config.settings import Settings
from app.oidc.claims import GROUPS_CLAIM, third_party_role, verified_email
from app.oidc.provider import ProviderClient, provider_unreachable

#: Logins started and not finished that the cookie remembers; older ones are dropped, so
#: that the cookie never outgrows what a browser keeps of one (4 KB).
MAX_PENDING_LOGINS = 3
#: Clock skew allowed between the provider and the service on the ID token's times.
ID_TOKEN_LEEWAY = 60
#: Longest provider user id and display name taken into the cookie token.
MAX_USER_FIELD_LENGTH = 256
#: Claims that name the user, best first (OpenID Connect Core 5.1). No other claim is
#: shown in their place: an email address or the subject is not a display name.
SHOWN_NAME_CLAIMS = ("name", "preferred_username")


class LoginFlow:
    """The configured providers' clients, and the login on them."""

    def __init__(self, settings: Settings) -> None:
        self.clients = {
            provider.name: ProviderClient(provider) for provider in settings.identity_providers
        }

    def authorization_url(
        self, provider: str, callback_url: str, return_url: str | None = None
    ) -> str:
        """Remember a new login in the login-state cookie; return the provider URL to visit.

        ``return_url``, already checked (``app/oidc/return_url.py``), is kept with the
        login's state, in the signed cookie: only the login that state names returns there.
        """
        client = self.clients[provider]
        login = client.create_authorization_url(callback_url)  # 502 if discovery fails
        forget_old_pending_logins(session, keep=MAX_PENDING_LOGINS - 1)  # and this one
        kept = {"return_url": return_url} if return_url is not None else {}
        client.save_authorize_data(redirect_uri=callback_url, **kept, **login)
        return str(login["url"])

    def pending_return_url(self, provider: str) -> str | None:
        """Return the return URL kept with the pending login this request's state names."""
        client = self.clients[provider]
        data = client.framework.get_state_data(session, request.args.get("state"))
        value = data.get("return_url") if isinstance(data, dict) else None
        return value if isinstance(value, str) else None

    def logged_in_user(self, provider: str) -> CookieUser:
        """Check the provider's answer on this request; return the user it logs in, or raise.

        The profile is ``{source, id, shownName}``, ``shownName`` left out when the
        provider knows no name for them; the role and the email are what the provider's
        claims grant (``app/oidc/claims.py``).
        """
        client = self.clients[provider]
        issuer = client.load_server_metadata()["issuer"]
        try:
            token = client.authorize_access_token(
                claims_options={
                    "iss": {"essential": True, "value": issuer},
                    "aud": {"essential": True, "value": client.client_id},
                },
                leeway=ID_TOKEN_LEEWAY,
            )
        except requests.RequestException as error:
            raise provider_unreachable(provider, error) from None
        except (AuthlibBaseError, JoseError, ValueError, KeyError, TypeError) as error:
            session.pop(pending_login_key(provider, request.args.get("state")), None)
            raise _login_failed(provider, _reason(error), error) from None
        id_claims = token.get("userinfo") or {}
        subject = id_claims.get("sub")
        if not isinstance(subject, str) or not 0 < len(subject) <= MAX_USER_FIELD_LENGTH:
            raise _login_failed(provider, "the provider sent no usable ID token subject")
        userinfo = _userinfo_if_needed(client, subject, token, id_claims)
        claims = {**userinfo, **id_claims}
        shown_name = _shown_name(claims)
        user = {"source": provider, "id": subject}
        if shown_name is not None:
            user["shownName"] = shown_name[:MAX_USER_FIELD_LENGTH]
        # the email and its verification are taken from the same answer, never mixed
        email = verified_email(id_claims if "email" in id_claims else userinfo)
        role = third_party_role(client.identity_provider, subject, claims.get(GROUPS_CLAIM), email)
        current_app.logger.info(
            "third-party login: provider=%s id=%r role=%s", provider, subject, role
        )
        return CookieUser(user, role, email)


def _userinfo_if_needed(
    client: ProviderClient, subject: str, token: dict[str, Any], id_claims: dict[str, Any]
) -> dict[str, Any]:
    """Return the userinfo endpoint's claims when the ID token's lack the name, the email or
    (with OIDC_<NAME>_ADMIN_GROUPS) the groups (OIDC Core 5.4); else an empty dict."""
    wanted = ["email"]
    if client.identity_provider.admin_groups:
        wanted.append(GROUPS_CLAIM)
    has_name = _shown_name(id_claims) is not None
    if has_name and all(claim in id_claims for claim in wanted):
        return {}
    # with a name already, a provider with no userinfo endpoint has nothing more to say
    if has_name and "userinfo_endpoint" not in client.load_server_metadata():
        return {}
    return _userinfo_of(client, subject, token)


def _userinfo_of(client: ProviderClient, subject: str, token: dict[str, Any]) -> dict[str, Any]:
    """Return the userinfo claims of the login's access token, if about ``subject``; else 400."""
    access_token = token.get("access_token")
    if not isinstance(access_token, str) or not access_token:
        raise _login_failed(client.name, "the provider sent no access token")
    claims = client.userinfo_claims(access_token)
    # OIDC Core 5.3.2: the userinfo sub must be the ID token's, or the answer is not used.
    if claims.get("sub") != subject:
        raise _login_failed(client.name, "userinfo is about another subject than the ID token")
    return claims


def _shown_name(claims: dict[str, Any]) -> str | None:
    for claim in SHOWN_NAME_CLAIMS:
        value = claims.get(claim)
        if isinstance(value, str) and value:
            return value
    return None


def _login_failed(provider: str, reason: str, error: Exception | None = None) -> BadRequest:
    current_app.logger.warning(
        "third-party login refused: provider=%s reason=%s error=%r", provider, reason, error
    )
    return BadRequest(f"login failed: {reason}")


def _reason(error: Exception) -> str:
    text = getattr(error, "error", None) or type(error).__name__
    description = getattr(error, "description", None)
    return f"{text}: {description}" if description else str(text)
