"""The OAuth 2 endpoints (docs/oauth.md), served with CLIENTS_FILE only.

``POST /oauth/token`` (RFC 6749): ``client_credentials`` for registered clients, and
``password`` and ``refresh_token`` over the same store and rules as ``POST /login`` and
``POST /token``. ``POST /oauth/introspect`` (RFC 7662) for registered clients, and
``POST /oauth/revoke`` (RFC 7009) for a registered client or the token's holder. Bodies
are forms; errors are RFC 6749's JSON (``app.oauth.errors``).
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request
from werkzeug.exceptions import BadRequest, ServiceUnavailable, TooManyRequests, Unauthorized

from app.auth.tokens import (
    InvalidTokenError,
    issue_access_token,
    role_for,
    verify_access_token,
)
from app.backends.interface import BackendUnavailable, IdleSession
from app.events import Event, Reason
from app.extensions import (
    current_settings,
    get_client_failure_limit,
    get_client_registry,
    get_clock,
    get_cutoffs,
    get_expected_claims,
    get_key_ring,
    get_store,
)
from app.http.request_body import FORM, read_fields
from app.http.request_log import note
from app.http.responses import bodiless
from app.oauth.clients import Client
from app.oauth.credentials import PUBLIC_CLIENT, presented_credentials
from app.oauth.errors import (
    OAuthError,
    invalid_client,
    invalid_grant,
    invalid_request,
    render_oauth_error,
)
from app.oauth.introspection import (
    INACTIVE,
    access_token_answer,
    refresh_token_answer,
)
from app.oauth.metadata import GRANT_TYPES
from app.views.auth import (
    access_token_for,
    check_password,
    forbid_caching,
    in_directory,
    limit_rate,
    note_idle_session,
    record_login,
    required_username,
    reserved_for_clients,
    revoke_refresh_token,
    rotated_tokens,
)

bp = Blueprint("oauth_server", __name__)
#: The grants, as an error names them.
GRANT_NAMES = ", ".join(GRANT_TYPES)
bp.after_request(forbid_caching)

#: The longest ``token`` introspection and revocation look at (an access token's limit).
MAX_TOKEN_PARAMETER = 8192


@bp.errorhandler(OAuthError)
def oauth_error(error: OAuthError) -> Response:
    return render_oauth_error(error)


@bp.errorhandler(BadRequest)
def bad_request(error: BadRequest) -> Response:
    """A body the service cannot read is RFC 6749's ``invalid_request``."""
    return render_oauth_error(invalid_request(str(error.description)))


@bp.errorhandler(Unauthorized)
def unauthorized_grant(error: Unauthorized) -> Response:
    """A wrong password or refresh token is RFC 6749's ``invalid_grant``, not a 401."""
    return render_oauth_error(invalid_grant("the grant is invalid"))


@bp.post("/oauth/token")
def token() -> Response:
    """Issue tokens for a ``client_credentials``, ``password`` or ``refresh_token`` grant."""
    limit_rate("token")
    fields = form_fields()
    grant_type = string_field(fields, "grant_type")
    presented = presented_credentials(request.headers.get("Authorization"), fields)
    if grant_type == "client_credentials":
        client = authenticated_client(presented)
        return client_credentials(client, fields)
    if grant_type not in GRANT_TYPES:
        raise OAuthError("unsupported_grant_type", f"grant_type must be one of {GRANT_NAMES}")
    if presented is not None:
        authenticated_unless_public(presented)
    if grant_type == "password":
        return password_grant(fields)
    return refresh_token_grant(fields)


def client_credentials(client: Client, fields: dict[str, Any]) -> Response:
    """Answer a registered client's own access token: ``client:<id>``, its role. No store
    is written: a client's token is only signed."""
    if "scope" in fields:
        raise OAuthError("invalid_scope", "no scope is defined: the token carries a role")
    settings = current_settings()
    expected = get_expected_claims()
    audiences: tuple[str, ...] = ()
    if client.audiences and expected is not None:
        audiences = tuple(name for name in client.audiences if name in expected.audiences)
        if not audiences:
            raise OAuthError(
                "unauthorized_client", "the client's audiences are none of TOKEN_AUDIENCE"
            )
    # a token is never refused as soon as issued; a grant that waited out a cut-off made
    # this second by `flask clients rotate-secret` or `remove` asks the file again, so the
    # old secret gets no token minted after the cut-off
    if get_cutoffs().wait_out(client.username) and not registry_holds(client):
        note(event=Event.LOGIN_FAILED, reason=Reason.BAD_CREDENTIALS)
        raise invalid_client("the client's secret changed or it was removed")
    access_token = issue_access_token(
        client.username,
        client.role,
        get_key_ring(),
        settings.access_token_lifetime,
        clock=get_clock(),
        expected=expected,
        audiences=audiences,
    )
    note(user=client.username, event=Event.LOGIN)
    return token_answer(access_token, None)


def password_grant(fields: dict[str, Any]) -> Response:
    """Log a user in as ``POST /login`` does: an access token and a refresh token."""
    username = required_username(fields)
    password = string_field(fields, "password")
    verified = check_password(username, password)
    refresh_token = record_login(username, verified)
    return token_answer(access_token_for(username), refresh_token)


def refresh_token_grant(fields: dict[str, Any]) -> Response:
    """Refresh as ``POST /token`` does, for the username the refresh token was recorded for.

    With rotation, the store's rotation finds the owner itself, so that a retired token
    presented here is caught as a reuse (its family ends) or retried within the grace,
    exactly as at ``POST /token``.
    """
    refresh_token = string_field(fields, "refresh_token")
    if current_settings().refresh_token_rotation:
        access_token, successor = rotated_tokens(refresh_token, None)
        return token_answer(access_token, successor)
    owner = get_store().owner_of(refresh_token) if refresh_token else None
    if isinstance(owner, IdleSession):
        note_idle_session(owner.owner)
        raise invalid_grant("the refresh token is unknown")
    if owner is None or reserved_for_clients(owner):
        note(reason=Reason.UNKNOWN_REFRESH_TOKEN, event=Event.REFRESH_FAILED)
        raise invalid_grant("the refresh token is unknown")
    if not in_directory(owner):
        note(user=owner, reason=Reason.USER_NOT_IN_DIRECTORY, event=Event.REFRESH_FAILED)
        raise invalid_grant("the refresh token is unknown")
    note(user=owner, event=Event.REFRESH)
    get_cutoffs().wait_out(owner)  # as POST /token does
    return token_answer(access_token_for(owner), None)


def token_answer(access_token: str, refresh_token: str | None) -> Response:
    answer: dict[str, Any] = {
        "access_token": access_token,
        "token_type": "Bearer",
        "expires_in": current_settings().access_token_lifetime,
    }
    if refresh_token is not None:
        answer["refresh_token"] = refresh_token
    return jsonify(answer)


@bp.post("/oauth/introspect")
def introspect() -> Response:
    """Answer whether a token is active, and whose, to a registered client (RFC 7662).

    An access token (a JWT, with dots) is verified as the protected endpoints verify it,
    with no store read; a refresh token (no dot) is looked up in the store.
    """
    fields = form_fields()
    authenticated_client(presented_credentials(request.headers.get("Authorization"), fields))
    presented = token_field(fields)
    if "." in presented:
        return jsonify(introspected_access_token(presented))
    live = get_store().describe(presented) if presented else None
    if live is None or reserved_for_clients(live.username) or not in_directory(live.username):
        return jsonify(INACTIVE)
    return jsonify(
        refresh_token_answer(live, role_for(live.username, current_settings().admin_username))
    )


def introspected_access_token(token: str) -> dict[str, Any]:
    settings = current_settings()
    try:
        claims = verify_access_token(
            token, get_key_ring(), settings.clock_skew, get_clock(), get_expected_claims()
        )
    except InvalidTokenError:
        return INACTIVE
    if get_cutoffs().refuses(claims["username"], claims["iat"]):  # logged out everywhere
        return INACTIVE
    return access_token_answer(claims)


@bp.post("/oauth/revoke")
def revoke() -> Response:
    """Revoke a refresh token as ``DELETE /token/{t}`` does; 200 for it and for any token
    that is not valid here (RFC 7009).

    A registered client authenticates; a caller naming no client, or only a public client's
    id, is the token's holder. A valid access token is not revoked (it is valid until its
    ``exp``, as SPEC.md says): ``unsupported_token_type``, RFC 7009's answer for a token
    type the server does not revoke, so that no caller takes a 200 for a revocation.
    """
    limit_rate("revoke")
    fields = form_fields()
    presented = presented_credentials(request.headers.get("Authorization"), fields)
    if presented is not None:
        authenticated_unless_public(presented)
    token = token_field(fields)
    if "." in token:
        if introspected_access_token(token)["active"]:
            raise OAuthError(
                "unsupported_token_type",
                "access tokens are not revoked: each is valid until its exp",
            )
    elif token:
        revoke_refresh_token(token)
    return bodiless(200)


def form_fields() -> dict[str, Any]:
    """Return the request's form: RFC 6749's bodies are ``application/x-www-form-urlencoded``.
    A parameter sent without a value is left out, as if omitted (RFC 6749, section 3.1)."""
    if request.mimetype != FORM:
        raise invalid_request(f"the body must be {FORM}")
    return {name: value for name, value in read_fields().items() if value != ""}


def authenticated_unless_public(presented: tuple[str, str, str]) -> None:
    """Authenticate a confidential client (``authenticated_client``); let a public one, which
    only names itself, pass. A registered client's id is never a public client's: it
    authenticates with its secret (RFC 6749, section 3.2.1)."""
    registry = get_client_registry()
    registered = registry is not None and registry.get(presented[0]) is not None
    if presented[2] != PUBLIC_CLIENT or registered:
        authenticated_client(presented)


def string_field(fields: dict[str, Any], name: str) -> str:
    value = fields.get(name)
    if value is None:  # an empty one is left out by form_fields
        raise invalid_request(f"{name} is required")
    if not isinstance(value, str):
        raise invalid_request(f"{name} must be a string")
    return value


def token_field(fields: dict[str, Any]) -> str:
    token = string_field(fields, "token")
    if len(token) > MAX_TOKEN_PARAMETER:
        return ""  # no token of this service is that long: unknown, not an error
    return token


def registry_holds(client: Client) -> bool:
    """Return whether CLIENTS_FILE, read again now, still holds ``client`` as it was."""
    registry = get_client_registry()
    return registry is not None and registry.still_holds(client)


def authenticated_client(presented: tuple[str, str, str] | None) -> Client:
    """Return the registered client the request authenticated as, or ``invalid_client``.

    A failed secret counts on LOGIN_FAILURE_LIMIT's counters of ``client:<id>``; over the
    limit, 429. A right secret is not counted and is never refused: it is 256 random bits,
    which no rate of guessing finds, and refusing it would let anyone lock a client out.
    """
    registry = get_client_registry()
    if presented is None or presented[2] == PUBLIC_CLIENT or registry is None:
        raise invalid_client("client authentication is required")
    client_id, secret, _ = presented
    client = registry.authenticate(client_id, secret)
    if client is not None:
        note(user=client.username)
        return client
    note(event=Event.LOGIN_FAILED, reason=Reason.BAD_CREDENTIALS)
    failures = get_client_failure_limit()
    if failures is not None and 0 < len(client_id) <= 256:
        try:
            wait = failures.attempt("client:" + client_id)
        except BackendUnavailable:
            note(rate_limit_error="1")
            raise ServiceUnavailable("try again shortly", retry_after=1) from None
        if wait is not None:
            note(reason=Reason.LOGIN_LIMITED, event=Event.LOGIN_LIMITED)
            raise TooManyRequests("too many failed secrets for this client", retry_after=wait)
    raise invalid_client()
