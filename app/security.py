"""Who is calling: token extractors, the role rule and the ``requires_roles`` decorator."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from flask import g, request
from werkzeug.exceptions import Forbidden, Unauthorized

from app.config import current_settings
from app.errors import unauthenticated
from app.keys import KeyRing
from app.tokens import ROLES, InvalidTokenError, verify_access_token, verify_cookie_token

View = TypeVar("View", bound=Callable[..., Any])

#: RFC 6750 credentials: the scheme (any case), one space, one b64token, nothing else.
BEARER_CREDENTIALS = re.compile(r"bearer ([A-Za-z0-9\-._~+/]+=*)", re.IGNORECASE)


def bearer_token() -> str | None:
    """Return the token of the request's single ``Authorization: Bearer`` header, if any."""
    values = request.headers.getlist("Authorization")
    match = BEARER_CREDENTIALS.fullmatch(values[0]) if len(values) == 1 else None
    return match.group(1) if match else None


def cookie_token() -> str | None:
    """Return the token held in the auth cookie, if any."""
    return request.cookies.get(current_settings().auth_cookie_name) or None


def authenticate(
    extract: Callable[[], str | None],
    verify: Callable[[str, KeyRing, int], dict[str, Any]],
    failure: Callable[[], Unauthorized],
) -> dict[str, Any]:
    """Return what ``verify`` makes of the token that ``extract`` finds, or raise ``failure()``."""
    token = extract()
    if token is not None:
        try:
            settings = current_settings()
            return verify(token, settings.signing_keys, settings.clock_skew)
        except InvalidTokenError:
            pass
    raise failure()


def authenticated_claims() -> dict[str, Any]:
    """Return the verified claims of the request's Bearer access token, or 401."""
    return authenticate(bearer_token, verify_access_token, unauthenticated)


def authenticated_cookie_user() -> dict[str, Any]:
    """Return the user named by the request's cookie token, or 401 (no Bearer challenge)."""
    return authenticate(cookie_token, verify_cookie_token, Unauthorized)


def role_allows(role: str, required: tuple[str, ...]) -> bool:
    """Return whether ``role`` may use an endpoint open to ``required`` (admin passes user)."""
    return not required or role in required or (role == "admin" and "user" in required)


def requires_roles(*roles: str) -> Callable[[View], View]:
    """Let a view run only for a valid Bearer token (else 401) of an allowed role (else 403).

    With no roles listed, any authenticated user passes. The verified claims
    are on ``g.user`` while the view runs.
    """
    unknown = set(roles) - set(ROLES)
    if unknown:
        raise ValueError(f"unknown roles: {sorted(unknown)}")

    def decorator(view: View) -> View:
        @wraps(view)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            g.user = authenticated_claims()
            if not role_allows(g.user["role"], roles):
                raise Forbidden()
            return view(*args, **kwargs)

        return guarded  # type: ignore[return-value]

    return decorator
