"""The names of security events and refusal reasons, defined once.

The request log shows them (``event``, ``reason``), the metrics count them, and
the operator commands log them: every one of those takes its names from here,
so that a name cannot be spelled two ways, nor be shown by the log and unknown
to the metrics. Members are strings (``StrEnum``): they go into the log as they are.
"""

# Names that contain "token" or "password" are names, not secrets:
# ruff: noqa: S105

from __future__ import annotations

from enum import StrEnum


class Event(StrEnum):
    """A security event: the ``event`` field of a request's line or of a command's line."""

    LOGIN = "login"
    LOGIN_FAILED = "login_failed"
    #: Refused before the password check: too many failed logins for the username.
    LOGIN_LIMITED = "login_limited"
    REFRESH = "refresh"
    REFRESH_FAILED = "refresh_failed"
    REFRESH_TOKEN_REUSE = "refresh_token_reuse"
    REFRESH_TOKEN_RETRY = "refresh_token_retry"
    REVOKE = "revoke"
    #: The third-party login's cookie token logged out (POST /auth/logout).
    LOGOUT = "logout"
    RATE_LIMITED = "rate_limited"
    USER_ADDED = "user_added"
    USER_PASSWORD_CHANGED = "user_password_changed"
    USER_REMOVED = "user_removed"
    #: One session ended (by its user, an admin, ``flask sessions``, or its idle timeout).
    SESSION_ENDED = "session_ended"
    #: Every session of a user ended, and their access tokens cut off.
    LOGGED_OUT_EVERYWHERE = "logged_out_everywhere"


class Reason(StrEnum):
    """Why a request was refused: the ``reason`` field of its line and the metrics' label."""

    #: 401: no credentials, or credentials that are not a token.
    MISSING = "missing"
    MALFORMED = "malformed"
    BAD_SIGNATURE = "bad_signature"
    EXPIRED = "expired"
    #: 403: a valid token of a role the endpoint does not admit.
    WRONG_ROLE = "wrong_role"
    #: 403 at the gateway: a rule of ACCESS_RULES_FILE denies (or none matches).
    DENIED_BY_RULE = "denied_by_rule"
    #: POST /token 401.
    UNKNOWN_REFRESH_TOKEN = "unknown_refresh_token"
    ANOTHER_USERS_TOKEN = "another_users_token"
    REUSED_REFRESH_TOKEN = "reused_refresh_token"
    #: With USERS_FILE: a refresh token of a username the directory no longer holds.
    USER_NOT_IN_DIRECTORY = "user_not_in_directory"
    #: With REFRESH_TOKEN_IDLE_TIMEOUT: a refresh token of a session unused that long, which
    #: ends with this refusal (event ``session_ended``).
    IDLE_SESSION = "idle_session"
    #: POST /login 401 with USERS_FILE: a wrong password and an unknown user alike, so
    #: that neither the log nor the metrics tell whether a username exists.
    BAD_CREDENTIALS = "bad_credentials"
    #: /api/v1/me 401: a cookie token that was logged out.
    LOGGED_OUT = "logged_out"
    #: 401 at a protected route or /auth/check: an access token issued at or before its
    #: user's cut-off (a logout everywhere).
    LOGGED_OUT_EVERYWHERE = "logged_out_everywhere"
    #: 403 on the login start or the logout, 401 at /auth/check for a cookie token: a
    #: request from another site.
    CROSS_SITE = "cross_site"
    #: 429: over RATE_LIMIT_AUTH (per address), over LOGIN_FAILURE_LIMIT (per username).
    RATE_LIMITED = "rate_limited"
    LOGIN_LIMITED = "login_limited"


#: The reasons of a 429, which the metrics count as rate-limited, not as auth failures.
LIMIT_REASONS = frozenset({Reason.RATE_LIMITED, Reason.LOGIN_LIMITED})
#: The reasons of a 401 or a 403: the ``reason`` label of the auth-failure counter.
AUTH_FAILURE_REASONS = tuple(reason for reason in Reason if reason not in LIMIT_REASONS)
