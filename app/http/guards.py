"""Who is calling: token extractors, the role rule and the ``requires_roles`` decorator."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import jwt
from flask import g, request
from werkzeug.exceptions import Unauthorized

from app.auth.tokens import (
    ROLES,
    CookieUser,
    InvalidTokenError,
    logout_digest,
    signed_texts,
    verify_access_token,
    verify_cookie_token,
)
from app.backends.interface import token_digest
from app.events import Event, Reason
from app.extensions import (
    current_settings,
    get_clock,
    get_cutoffs,
    get_expected_claims,
    get_key_ring,
    get_store,
)
from app.http.errors import forbidden_response, unauthenticated_response
from app.http.request_log import note

View = TypeVar("View", bound=Callable[..., Any])

#: RFC 6750 b64token: 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


def bearer_token() -> str | None:
    """Return the token of the request's single ``Authorization: Bearer`` header, if any.

    RFC 6750 credentials: the scheme in any case, one space, one b64token, nothing
    else. A second Authorization header arrives joined to the first by a comma,
    which no b64token holds, so it is refused too.
    """
    value: str | None = request.environ.get("HTTP_AUTHORIZATION")
    if value is None:
        return None
    scheme, _, token = value.partition(" ")
    if len(scheme) != 6 or not scheme.isascii() or scheme.lower() != "bearer":
        return None
    return token if B64TOKEN.fullmatch(token) else None


def cookie_token() -> str | None:
    """Return the token held in the auth cookie, if any."""
    return request.cookies.get(current_settings().auth_cookie_name) or None


def verified_bearer_claims() -> tuple[dict[str, Any] | None, str]:
    """Return the verified claims of the request's Bearer token, or None and the Reason why."""
    token = bearer_token()
    if token is None:
        malformed = "HTTP_AUTHORIZATION" in request.environ
        return None, Reason.MALFORMED if malformed else Reason.MISSING
    settings = current_settings()
    try:
        claims = verify_access_token(
            token, get_key_ring(), settings.clock_skew, get_clock(), get_expected_claims()
        )
    except InvalidTokenError as error:
        return None, error.reason
    # issued at or before its user's logout everywhere: refused as an expired one is
    if get_cutoffs().refuses(claims["username"], claims["iat"]):
        return None, Reason.LOGGED_OUT_EVERYWHERE
    return claims, ""


def verified_cookie_user() -> tuple[CookieUser | None, int, str]:
    """Return the user named by the request's cookie token and its expiry (whole seconds),
    or None, 0 and the Reason it is refused.

    A token logged out (``log_out_cookie_token``) is refused too: the store is read, after
    the signature, so only a token of ours costs a look-up; a store that cannot answer
    raises BackendUnavailable (a 503), never a pass.
    """
    token = cookie_token()
    if token is None:
        return None, 0, Reason.MISSING
    settings = current_settings()
    try:
        user = verify_cookie_token(token, get_key_ring(), settings.clock_skew, get_clock())
    except InvalidTokenError as error:
        return None, 0, error.reason
    expires_at = _signed_expiry(token)
    if expires_at is None:
        return None, 0, Reason.MALFORMED
    if "id" in user.profile:
        note(user=user.profile["id"])
    if _is_logged_out(token):
        return None, 0, Reason.LOGGED_OUT
    return user, expires_at, ""


def authenticated_cookie_user() -> dict[str, str]:
    """Return the user ``{source, id, shownName}`` named by the request's cookie token, or
    401 (no Bearer challenge)."""
    user, _, reason = verified_cookie_user()
    if user is None:
        note(reason=reason)
        raise Unauthorized()
    return user.profile


def log_out_cookie_token() -> None:
    """Refuse the request's valid cookie token from now until it expires, on every host.

    The entry is keyed on the digest of the token's signing input (``logout_digest``),
    which no rewriting of its signature changes, so a token with only SPEC.md's claims
    (``sub``, ``exp``) is refused too; it is kept ``CLOCK_SKEW`` seconds past ``exp``
    for hosts whose clocks lag. A missing, invalid or expired token needs none.
    """
    token = cookie_token()
    if token is None:
        return
    settings = current_settings()
    try:
        user = verify_cookie_token(token, get_key_ring(), settings.clock_skew, get_clock())
    except InvalidTokenError:
        return
    # verified just above: its exp is the signed one
    expires_at = jwt.decode(token, options={"verify_signature": False})["exp"]
    store = get_store()
    for digest in _deny_digests(token):
        store.deny(digest, expires_at + settings.clock_skew)
    if "id" in user.profile:
        note(user=user.profile["id"])
    note(event=Event.LOGOUT)


def _is_logged_out(token: str) -> bool:
    """Return whether a logout denied ``token``, a cookie token verified just before."""
    return get_store().is_denied(*_deny_digests(token))


def _deny_digests(token: str) -> list[str]:
    """Return the digests a logout of ``token``, a verified cookie token, denies: that of
    its signing input, then that of each text the release before accepted for it."""
    # The release before this one denied a token by the digest of its whole text, and
    # took either ES256 form of it: its entries are read until they expire (at most
    # COOKIE_TOKEN_LIFETIME + CLOCK_SKEW after the upgrade), and its hosts, during a
    # rolling upgrade, find a logout made here.
    texts = signed_texts(token, get_key_ring())
    return [logout_digest(token), *(token_digest(text) for text in texts)]


def _signed_expiry(token: str) -> int | None:
    """Return the ``exp`` of a token verified just before, in whole seconds rounded down
    (so never later than the token's own), or None when it is no finite number."""
    expires_at = jwt.decode(token, options={"verify_signature": False})["exp"]
    return math.floor(expires_at) if math.isfinite(expires_at) else None


def role_allows(role: str, required: tuple[str, ...]) -> bool:
    """Return whether ``role`` may use an endpoint open to ``required`` (admin passes user)."""
    return not required or role in required or (role == "admin" and "user" in required)


def requires_roles(*roles: str) -> Callable[[View], View]:
    """Let a view run only for a valid Bearer token (else 401) of an allowed role (else 403).

    With no roles listed, any authenticated user passes. The verified claims
    are on ``g.user`` while the view runs. The 401 and 403 are the responses
    ``app/http/errors.py`` renders for them, returned ready rather than raised.
    """
    unknown = set(roles) - set(ROLES)
    if unknown:
        raise ValueError(f"unknown roles: {sorted(unknown)}")

    def decorator(view: View) -> View:
        @wraps(view)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            claims, reason = verified_bearer_claims()
            if claims is None:
                note(reason=reason)
                return unauthenticated_response()
            if not role_allows(claims["role"], roles):
                # one note, not two: the refusal costs no more than the answer
                note(user=claims["username"], reason=Reason.WRONG_ROLE)
                return forbidden_response()
            note(user=claims["username"])
            g.user = claims
            return view(*args, **kwargs)

        return guarded  # type: ignore[return-value]  # wraps() keeps the view's signature

    return decorator
