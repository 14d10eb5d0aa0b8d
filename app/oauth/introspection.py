"""Introspection (RFC 7662): what an active token's answer says."""

from __future__ import annotations

from typing import Any

from app.backends.interface import LiveToken
from app.config.usernames import CLIENT_USERNAME_PREFIX

#: The answer for an expired, revoked, cut-off or foreign token: this and nothing else.
INACTIVE: dict[str, Any] = {"active": False}
#: The access token's own claims an answer repeats when the token has them.
STANDARD_MEMBERS = ("iss", "aud", "jti")


def access_token_answer(claims: dict[str, Any]) -> dict[str, Any]:
    """Return the answer for an active access token of verified ``claims``: the role in
    ``role`` (no ``scope``), ``client_id`` for a registered client's token."""
    username = claims["username"]
    answer: dict[str, Any] = {
        "active": True,
        "token_type": "Bearer",
        "username": username,
        "sub": claims.get("sub", username),
        "role": claims["role"],
        "iat": claims["iat"],
        "exp": claims["exp"],
    }
    if username.startswith(CLIENT_USERNAME_PREFIX):
        answer["client_id"] = username.removeprefix(CLIENT_USERNAME_PREFIX)
    answer.update((name, claims[name]) for name in STANDARD_MEMBERS if name in claims)
    return answer


def refresh_token_answer(live: LiveToken, role: str) -> dict[str, Any]:
    """Return the answer for an active refresh token, as the store knows it: ``exp``
    only for a token with a lifetime (REFRESH_TOKEN_LIFETIME)."""
    answer: dict[str, Any] = {
        "active": True,
        "token_type": "refresh_token",
        "username": live.username,
        "sub": live.username,
        "role": role,
        "iat": live.issued_at,
    }
    if live.expires_at is not None:
        answer["exp"] = live.expires_at
    return answer
