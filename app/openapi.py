"""The service's OpenAPI 3.1 document: every endpoint, body, answer and header, in one place.

``openapi_json(app)`` serves it from ``GET /openapi.json``. It is built once per
app, on first use, from the tables below and the app's own routes: an operation
is listed only if the app routes its path and method (``/metrics`` appears where
a metrics endpoint is served), and each GET comes with the HEAD that Flask adds
to it (the same answers: headers, Content-Type included, and no body). The
settings fill in what is configured: the auth cookie's name and the providers.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from flask import Flask

from app.config import MAX_BODY_BYTES, PROVIDER_NAME, Settings
from app.request_body import DECIMAL, MAX_FORM_FIELDS
from app.tokens import MAX_USERNAME_LENGTH, REFRESH_TOKEN_LENGTH, ROLES, USERNAME_PATTERN

#: The version of this document's API (pyproject.toml's version of the service).
API_VERSION = "0.1.0"
EXTENSION_KEY = "openapi_json"
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
#: The shared error answers (components.responses), by status.
ERRORS = {
    400: "BadRequest",
    404: "NotFound",
    413: "PayloadTooLarge",
    415: "UnsupportedMediaType",
    429: "TooManyRequests",
    502: "BadGateway",
    503: "StoreUnavailable",
}
#: A number as a form field spells it.
FORM_NUMBER = {
    "type": "string",
    "pattern": f"^{DECIMAL.pattern}$",
    "description": "A decimal number: an optional minus, digits, an optional fraction.",
}
#: Requirements of the two security schemes.
BEARER: list[dict[str, list[str]]] = [{"bearerAuth": []}]
COOKIE: list[dict[str, list[str]]] = [{"cookieAuth": []}]
#: A well-formed example token, signed with a throwaway key: it verifies nowhere.
EXAMPLE_ACCESS_TOKEN = ".".join(
    (
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9",
        "eyJ1c2VybmFtZSI6ImFsaWNlIiwicm9sZSI6InVzZXIiLCJpYXQiOjE3NjcyMjU2MDAsImV4cCI6MTc2NzIyNTY2MH0",
        "K6_3gFIYhZHXfVVrd5loTZQqowbElvy5URBCh-edSaI",
    )
)
EXAMPLE_REFRESH_TOKEN = "Q3vZt8mK2pLx9RbN4cWf7hYs1GdJ6uAe0TnVoEiHkX"  # noqa: S105 (an example)
EXAMPLE_TOKENS = {"accessToken": EXAMPLE_ACCESS_TOKEN, "refreshToken": EXAMPLE_REFRESH_TOKEN}
EXAMPLE_CLAIMS = {"username": "alice", "role": "user", "iat": 1767225600, "exp": 1767225660}
EXAMPLE_ADMIN_CLAIMS = {**EXAMPLE_CLAIMS, "username": "admin", "role": "admin"}


def openapi_json(app: Flask) -> bytes:
    """Return the app's OpenAPI document as JSON bytes, built on the first call only."""
    document: bytes | None = app.extensions.get(EXTENSION_KEY)
    if document is None:
        document = json.dumps(openapi_document(app), separators=(",", ":")).encode()
        app.extensions[EXTENSION_KEY] = document
    return document


def openapi_document(app: Flask) -> dict[str, Any]:
    """Return the OpenAPI 3.1 document of the operations that ``app`` routes."""
    settings: Settings = app.config["SETTINGS"]
    routed = routes(app)
    paths: dict[str, dict[str, Any]] = {}
    for path, operations in path_items(settings).items():
        item = {
            method: operation
            for method, operation in with_head(operations).items()
            if (template(path), method) in routed
        }
        if item:
            paths[path] = item
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Token service",
            "version": API_VERSION,
            "summary": "Session-less token authentication and role authorization",
            "description": DESCRIPTION,
            "license": {"name": "MIT", "identifier": "MIT"},
        },
        "tags": TAGS,
        "paths": paths,
        "components": components(settings),
    }


def routes(app: Flask) -> set[tuple[str, str]]:
    """Return the (path template, lower-case method) pairs that ``app`` routes."""
    return {
        (template(rule.rule), method.lower())
        for rule in app.url_map.iter_rules()
        if rule.endpoint != "static"
        for method in rule.methods or ()
        if method != "OPTIONS"
    }


def template(path: str) -> str:
    """Return ``path`` with every variable, Flask's ``<...>`` or OpenAPI's ``{...}``, as ``{}``."""
    return re.sub(r"<[^>]*>|\{[^}]*\}", "{}", path)


def with_head(operations: dict[str, Any]) -> dict[str, Any]:
    """Return ``operations`` plus the HEAD of its GET: the same answers, headers only."""
    if "get" not in operations:
        return operations
    head = copy.deepcopy(operations["get"])
    head["operationId"] += "Head"
    head["summary"] += " (headers only)"
    return {**operations, "head": head}


# --- building blocks ----------------------------------------------------------------


def ref(kind: str, name: str) -> dict[str, str]:
    return {"$ref": f"#/components/{kind}/{name}"}


def json_content(schema: dict[str, Any], example: Any = None) -> dict[str, Any]:
    content: dict[str, Any] = {"schema": schema}
    if example is not None:
        content["example"] = example
    return {JSON: content}


def answer(
    description: str,
    schema: dict[str, Any] | None = None,
    example: Any = None,
    **headers: dict[str, Any],
) -> dict[str, Any]:
    """Return a response object: a JSON body if ``schema`` is given, and ``headers``."""
    response: dict[str, Any] = {"description": description}
    if headers:
        response["headers"] = {name.replace("_", "-"): value for name, value in headers.items()}
    if schema is not None:
        response["content"] = json_content(schema, example)
    return response


def errors(*statuses: int) -> dict[str, Any]:
    return {str(status): ref("responses", ERRORS[status]) for status in statuses}


def body(
    json_schema: dict[str, Any], form_schema: dict[str, Any], example: dict[str, Any]
) -> dict[str, Any]:
    """Return a request body taken as a JSON object or as a URL-encoded form."""
    form_example = {name: str(value) for name, value in example.items()}
    return {
        "required": True,
        "description": (
            f"A JSON object or a URL-encoded form (UTF-8, not compressed), at most "
            f"{MAX_BODY_BYTES} bytes. Fields not listed are ignored; a field given twice is 400."
        ),
        "content": {
            JSON: {"schema": json_schema, "example": example},
            FORM: {"schema": form_schema, "example": form_example},
        },
    }


def no_store(description: str, schema: dict[str, Any], example: Any) -> dict[str, Any]:
    """Return a token answer, which no cache may keep (RFC 6749, section 5.1)."""
    return answer(
        description,
        schema,
        example,
        Cache_Control=ref("headers", "CacheControlNoStore"),
        Pragma=ref("headers", "PragmaNoCache"),
    )


# --- the operations -----------------------------------------------------------------


def path_items(settings: Settings) -> dict[str, dict[str, Any]]:
    """Return every operation the service can serve, by OpenAPI path and method."""
    provider = {
        "name": "provider",
        "in": "path",
        "required": True,
        "description": "Name of a configured identity provider ("
        + (", ".join(p.name for p in settings.identity_providers) or "none is configured")
        + "); any other name is 404.",
        "schema": {"type": "string", "pattern": f"^{PROVIDER_NAME.pattern}$"},
        "example": settings.identity_providers[0].name if settings.identity_providers else "corp",
    }
    unauthorized_bearer = {"401": ref("responses", "BearerUnauthorized")}
    limited = errors(429) if settings.rate_limit_auth else {}
    login_limited = limited or (
        errors(429) if settings.users_file and settings.login_failure_limit else {}
    )
    if settings.users_file:
        login_description = (
            "The password is checked against the user directory: a wrong password or an "
            "unknown username is 401. The role is `admin` for exactly the configured "
            "ADMIN_USERNAME, `user` for anyone else."
        )
        login_refused = {"401": ref("responses", "Unauthorized")}
    else:
        login_description = (
            "Any username is accepted (1 to 256 characters, not only whitespace, without "
            "control characters, line separators or bidirectional controls) and the "
            "password is not checked. The role is "
            "`admin` for exactly the configured ADMIN_USERNAME, `user` for anyone else."
        )
        login_refused = {}
    return {
        "/login": {
            "post": {
                "tags": ["tokens"],
                "operationId": "login",
                "summary": "Log in: issue an access token and a refresh token",
                "description": login_description,
                "requestBody": body(
                    ref("schemas", "LoginRequest"),
                    ref("schemas", "LoginForm"),
                    {"username": "alice", "password": "any"},
                ),
                "responses": {
                    "200": {
                        **no_store(
                            "Tokens issued; the refresh token is recorded for the username.",
                            ref("schemas", "Tokens"),
                            EXAMPLE_TOKENS,
                        ),
                        "links": {
                            "refresh": {
                                "operationId": "refreshAccessToken",
                                "description": "Renew the access token with this refresh token.",
                                "requestBody": {
                                    "username": "$request.body#/username",
                                    "refreshToken": "$response.body#/refreshToken",
                                },
                            },
                            "revoke": {
                                "operationId": "revokeRefreshToken",
                                "description": "Revoke this refresh token.",
                                "parameters": {"refreshToken": "$response.body#/refreshToken"},
                            },
                        },
                    },
                    **login_refused,
                    **errors(400, 413, 415),
                    **login_limited,
                    **errors(503),
                },
            }
        },
        "/token": {
            "post": {
                "tags": ["tokens"],
                "operationId": "refreshAccessToken",
                "summary": "Issue a new access token for a refresh token",
                "description": "The role is computed again from the username.",
                "requestBody": body(
                    ref("schemas", "RefreshRequest"),
                    ref("schemas", "RefreshForm"),
                    {"username": "alice", "refreshToken": EXAMPLE_REFRESH_TOKEN},
                ),
                "responses": {
                    "200": no_store(
                        "The refresh token is recorded for exactly this username.",
                        ref("schemas", "AccessToken"),
                        {"accessToken": EXAMPLE_ACCESS_TOKEN},
                    ),
                    "401": ref("responses", "Unauthorized"),
                    **errors(400, 413, 415),
                    **limited,
                    **errors(503),
                },
            }
        },
        "/token/{refreshToken}": {
            "delete": {
                "tags": ["tokens"],
                "operationId": "revokeRefreshToken",
                "summary": "Revoke a refresh token",
                "description": (
                    "Access tokens already issued stay valid until they expire. "
                    "An unknown token is ignored: the answer is 204 all the same."
                ),
                "parameters": [
                    {
                        "name": "refreshToken",
                        "in": "path",
                        "required": True,
                        "description": "The refresh token, as `POST /login` issued it.",
                        "schema": {"type": "string", "minLength": 1},
                        "example": EXAMPLE_REFRESH_TOKEN,
                    }
                ],
                "responses": {
                    "204": answer(
                        "Revoked, or unknown: no body either way.",
                        Cache_Control=ref("headers", "CacheControlNoStore"),
                    ),
                    **errors(503),
                },
            }
        },
        "/restaurant-reservation": {
            "post": {
                "tags": ["resources"],
                "operationId": "reserveTable",
                "summary": "Book a table: echo the guest count with the caller's claims",
                "description": "Any role. The token is checked before the body is read.",
                "security": BEARER,
                "requestBody": body(
                    ref("schemas", "ReservationRequest"),
                    ref("schemas", "ReservationForm"),
                    {"guestsCount": 4},
                ),
                "responses": {
                    "200": answer(
                        "The reservation, with the caller's claims.",
                        ref("schemas", "Reservation"),
                        {"user": EXAMPLE_CLAIMS, "guestsCount": 4},
                    ),
                    **unauthorized_bearer,
                    **errors(400, 413, 415),
                },
            }
        },
        "/user-accessible": {
            "get": {
                "tags": ["resources"],
                "operationId": "userAccessible",
                "summary": "A resource for any authenticated user (admins included)",
                "security": BEARER,
                "responses": {
                    "200": answer(
                        "The caller's claims.",
                        greeting("for all users"),
                        {"message": "for all users", "user": EXAMPLE_CLAIMS},
                    ),
                    **unauthorized_bearer,
                },
            }
        },
        "/admin-accessible": {
            "get": {
                "tags": ["resources"],
                "operationId": "adminAccessible",
                "summary": "A resource for the admin only",
                "security": BEARER,
                "responses": {
                    "200": answer(
                        "The caller's claims.",
                        greeting("for admins only"),
                        {"message": "for admins only", "user": EXAMPLE_ADMIN_CLAIMS},
                    ),
                    **unauthorized_bearer,
                    "403": ref("responses", "Forbidden"),
                },
            }
        },
        "/api/v1/me": {
            "get": {
                "tags": ["third-party login"],
                "operationId": "me",
                "summary": "The user of a third-party login, named by the cookie token",
                "description": (
                    "Only the cookie authenticates here, never a Bearer token. A logged-out "
                    "cookie token is 401; the store is asked, so it may be 503."
                ),
                "security": COOKIE,
                "responses": {
                    "200": answer(
                        "The logged user.",
                        ref("schemas", "ThirdPartyUser"),
                        {"source": "corp", "id": "248289761001", "shownName": "Alice Smith"},
                    ),
                    "401": ref("responses", "Unauthorized"),
                    **errors(503),
                },
            }
        },
        "/auth/{provider}/login": {
            "get": {
                "tags": ["third-party login"],
                "operationId": "thirdPartyLogin",
                "summary": "Start a third-party login: redirect to the identity provider",
                "description": (
                    "OpenID Connect authorization code flow with PKCE (S256), state and nonce. "
                    "State, nonce and PKCE verifier ride in the short-lived signed "
                    "`login_state` cookie."
                ),
                "parameters": [provider],
                "responses": {
                    "302": answer(
                        "To the provider's authorization endpoint.",
                        Location=ref("headers", "Location"),
                        Set_Cookie=ref("headers", "SetLoginStateCookie"),
                    ),
                    "403": answer(
                        "Another site's request (Sec-Fetch-Site, Origin).",
                        ref("schemas", "NoAccess"),
                        {"message": "No access"},
                    ),
                    **errors(404, 502),
                },
            }
        },
        "/auth/{provider}/callback": {
            "get": {
                "tags": ["third-party login"],
                "operationId": "thirdPartyCallback",
                "summary": "Finish a third-party login: check the answer, set the cookie token",
                "description": (
                    "Where the provider sends the browser back. The code is exchanged, the ID "
                    "token checked (signature, issuer, audience, expiry, nonce), and the cookie "
                    "token set; then a redirect to LOGIN_REDIRECT_URL."
                ),
                "parameters": [
                    provider,
                    *(
                        {
                            "name": name,
                            "in": "query",
                            "required": False,
                            "description": description,
                            "schema": {"type": "string"},
                        }
                        for name, description in (
                            ("code", "The authorization code (RFC 6749, section 4.1.2)."),
                            ("state", "The state the login sent, echoed by the provider."),
                            ("error", "The provider's error code, if the login failed there."),
                        )
                    ),
                ],
                "responses": {
                    "302": answer(
                        "Logged in: to LOGIN_REDIRECT_URL, with the cookie token set.",
                        Location=ref("headers", "Location"),
                        Set_Cookie=ref("headers", "SetAuthCookie"),
                    ),
                    "400": answer(
                        "The login failed, was replayed or was tampered with.",
                        ref("schemas", "Message"),
                        {"message": "login failed: mismatching_state: CSRF Warning!"},
                    ),
                    **errors(404, 502),
                },
            }
        },
        "/auth/logout": {
            "post": {
                "tags": ["third-party login"],
                "operationId": "thirdPartyLogout",
                "summary": "Refuse the cookie token from now on and clear it",
                "responses": {
                    "204": answer(
                        "The cookie is cleared, whether or not one was set; the token it held "
                        "is refused until it expires.",
                        Set_Cookie=ref("headers", "ClearAuthCookie"),
                    ),
                    "403": answer(
                        "Another site's request (Sec-Fetch-Site, Origin).",
                        ref("schemas", "NoAccess"),
                        {"message": "No access"},
                    ),
                    **errors(503),
                },
            }
        },
        "/healthz": {
            "get": {
                "tags": ["operations"],
                "operationId": "healthz",
                "summary": "Liveness: 200 while the process serves requests",
                "responses": {
                    "200": answer("Alive.", status("ok"), {"status": "ok"}),
                },
            }
        },
        "/readyz": {
            "get": {
                "tags": ["operations"],
                "operationId": "readyz",
                "summary": "Readiness: 200 when the refresh-token store answers",
                "responses": {
                    "200": answer("Ready.", status("ready"), {"status": "ready"}),
                    **errors(503),
                },
            }
        },
        "/metrics": {
            "get": {
                "tags": ["operations"],
                "operationId": "metrics",
                "summary": "Metrics in the Prometheus text format",
                "responses": {
                    "200": {
                        "description": "The current metrics.",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    **errors(404),  # METRICS=off, or a client outside METRICS_ALLOW
                },
            }
        },
        "/.well-known/jwks.json": {
            "get": {
                "tags": ["operations"],
                "operationId": "jwks",
                "summary": "The public keys that verify access and cookie tokens (EdDSA, ES256)",
                "description": (
                    "Current and previous public keys, each with `kid`, `alg` and "
                    "`use: sig`. With HS256 (the default) there is no public key: 404."
                ),
                "responses": {
                    "200": answer(
                        "The JSON Web Key Set.",
                        {
                            "type": "object",
                            "required": ["keys"],
                            "properties": {
                                "keys": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "required": ["kty", "kid", "alg", "use"],
                                        "properties": {
                                            "kty": {"enum": ["OKP", "EC"]},
                                            "kid": {"type": "string"},
                                            "alg": {"enum": ["EdDSA", "ES256"]},
                                            "use": {"const": "sig"},
                                        },
                                    },
                                }
                            },
                        },
                        Cache_Control={"schema": {"type": "string"}},
                        ETag={"schema": {"type": "string"}},
                    ),
                    "304": answer("Not modified: the If-None-Match ETag is current."),
                    **errors(404),
                },
            }
        },
        "/openapi.json": {
            "get": {
                "tags": ["operations"],
                "operationId": "openapi",
                "summary": "This document",
                "responses": {
                    "200": answer(
                        "The OpenAPI 3.1 document of the service.",
                        {
                            "type": "object",
                            "required": ["openapi", "info", "paths"],
                            "properties": {"openapi": {"type": "string", "pattern": r"^3\.1\."}},
                        },
                    ),
                },
            }
        },
    }


def request_schemas(
    json_name: str, form_name: str, fields: dict[str, dict[str, Any]], *required: str
) -> dict[str, dict[str, Any]]:
    """Return a body's JSON schema and its form twin: every field is text in a form."""
    form_fields = {
        name: field if field["type"] == "string" else FORM_NUMBER for name, field in fields.items()
    }
    return {
        json_name: {"type": "object", "required": list(required), "properties": fields},
        form_name: {
            "type": "object",
            "required": list(required),
            "properties": form_fields,
            "additionalProperties": {"type": "string"},
            "maxProperties": MAX_FORM_FIELDS,
        },
    }


def greeting(message: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["message", "user"],
        "properties": {"message": {"const": message}, "user": ref("schemas", "Claims")},
        "additionalProperties": False,
    }


def status(value: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"const": value}},
        "additionalProperties": False,
    }


# --- components ---------------------------------------------------------------------


def components(settings: Settings) -> dict[str, Any]:
    """Return the schemas, answers, headers and security schemes the operations refer to."""
    username = {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_USERNAME_LENGTH,
        "pattern": USERNAME_PATTERN,
        "description": "Any text but whitespace alone, control characters, line separators"
        " and bidirectional controls; case-sensitive, never trimmed.",
    }
    jwt = {
        "type": "string",
        "pattern": "^[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+$",
        "description": "A JWT signed with HS256; its claims are `Claims`.",
    }
    message = {
        "type": "object",
        "required": ["message"],
        "properties": {"message": {"type": "string", "minLength": 1}},
        "additionalProperties": False,
    }
    login: dict[str, dict[str, Any]] = {
        "username": username,
        "password": {
            "type": "string",
            "description": "Checked against the user directory."
            if settings.users_file
            else "Not checked.",
        },
    }
    login_required = ("username", "password") if settings.users_file else ("username",)
    refresh: dict[str, dict[str, Any]] = {
        "username": username,
        "refreshToken": {
            "type": "string",
            "description": "Known and recorded for this very username, else 401.",
        },
    }
    reservation: dict[str, dict[str, Any]] = {
        "guestsCount": {
            "type": "number",
            "description": "Any finite number; echoed as a JSON number.",
        }
    }
    cookie = settings.auth_cookie_name
    return {
        "securitySchemes": {
            "bearerAuth": {
                "type": "http",
                "scheme": "bearer",
                "bearerFormat": "JWT",
                "description": (
                    "`Authorization: Bearer <accessToken>` with an access token from "
                    "`POST /login` or `POST /token`: one header, one token. Missing, "
                    "malformed, wrongly signed or expired (from the second `exp` names): 401."
                ),
            },
            "cookieAuth": {
                "type": "apiKey",
                "in": "cookie",
                "name": cookie,
                "description": (
                    "The cookie token that a third-party login sets: a JWT (HS256) whose "
                    "payload is `{sub: {source, id, shownName}, exp}`."
                ),
            },
        },
        "schemas": {
            **request_schemas("LoginRequest", "LoginForm", login, *login_required),
            **request_schemas("RefreshRequest", "RefreshForm", refresh, "username", "refreshToken"),
            **request_schemas("ReservationRequest", "ReservationForm", reservation, "guestsCount"),
            "Tokens": {
                "type": "object",
                "required": ["accessToken", "refreshToken"],
                "properties": {
                    "accessToken": ref("schemas", "AccessTokenText"),
                    "refreshToken": {
                        "type": "string",
                        "pattern": f"^[A-Za-z0-9]{{{REFRESH_TOKEN_LENGTH}}}$",
                        "description": "Opaque; valid until revoked.",
                    },
                },
                "additionalProperties": False,
            },
            "AccessToken": {
                "type": "object",
                "required": ["accessToken"],
                "properties": {"accessToken": ref("schemas", "AccessTokenText")},
                "additionalProperties": False,
            },
            "AccessTokenText": jwt,
            "Claims": {
                "type": "object",
                "description": "The verified claims of the caller's access token.",
                "required": ["username", "role", "iat", "exp"],
                "properties": {
                    "username": username,
                    "role": {"enum": list(ROLES)},
                    "iat": {"type": "integer", "description": "Issued at, Unix seconds."},
                    "exp": {"type": "integer", "description": "Expires at, Unix seconds."},
                },
                "additionalProperties": False,
            },
            "Reservation": {
                "type": "object",
                "required": ["user", "guestsCount"],
                "properties": {
                    "user": ref("schemas", "Claims"),
                    "guestsCount": {"type": "number"},
                },
                "additionalProperties": False,
            },
            "ThirdPartyUser": {
                "type": "object",
                "description": "The cookie token's `sub`; each field may be absent.",
                "properties": {
                    "source": {"type": "string", "description": "Identity provider name."},
                    "id": {"type": "string", "description": "The provider's id of the user."},
                    "shownName": {"type": "string", "description": "Display name."},
                },
                "additionalProperties": False,
            },
            "Message": message,
            "NoAccess": {**message, "properties": {"message": {"const": "No access"}}},
        },
        "responses": {
            "BadRequest": answer(
                "The body is not a JSON object or form, or a field is missing or wrong.",
                ref("schemas", "Message"),
                {"message": "username is required"},
            ),
            "Unauthorized": {
                "description": "Unknown or invalid credentials.",
                "content": {"text/plain": {"schema": {"const": "Unauthorized"}}},
            },
            "BearerUnauthorized": {
                "description": "The access token is missing, malformed, wrongly signed or expired.",
                "headers": {"WWW-Authenticate": ref("headers", "WWWAuthenticateBearer")},
                "content": {"text/plain": {"schema": {"const": "Unauthorized"}}},
            },
            "Forbidden": answer(
                "The token is valid, but its role is not allowed here.",
                ref("schemas", "NoAccess"),
                {"message": "No access"},
            ),
            "NotFound": answer(
                "No such identity provider (or, for any path, no such endpoint).",
                ref("schemas", "Message"),
                {"message": "unknown identity provider"},
            ),
            "MethodNotAllowed": answer(
                "Any method a path does not list, OPTIONS included (no CORS).",
                ref("schemas", "Message"),
                {"message": "method not allowed"},
                Allow=ref("headers", "Allow"),
            ),
            "PayloadTooLarge": answer(
                f"The body is larger than {MAX_BODY_BYTES} bytes.",
                ref("schemas", "Message"),
                {"message": f"request body is larger than {MAX_BODY_BYTES} bytes"},
            ),
            "UnsupportedMediaType": answer(
                "The body is neither JSON nor a URL-encoded form, or is compressed.",
                ref("schemas", "Message"),
                {
                    "message": "request body must be application/json or "
                    "application/x-www-form-urlencoded"
                },
            ),
            "BadGateway": answer(
                "The identity provider did not answer, or sent an unusable discovery document.",
                ref("schemas", "Message"),
                {"message": "identity provider did not answer"},
            ),
            "TooManyRequests": answer(
                "Too many requests from this client address (RATE_LIMIT_AUTH), or, on "
                "/login with a user directory, too many failed logins for this username "
                "(LOGIN_FAILURE_LIMIT); Retry-After says in how many seconds the window "
                "that refused it frees.",
                ref("schemas", "Message"),
                {"message": "too many requests"},
                Retry_After=ref("headers", "RetryAfter"),
            ),
            "StoreUnavailable": answer(
                "The refresh-token store cannot be reached; a retry may succeed.",
                ref("schemas", "Message"),
                {"message": "token store is unavailable, try again shortly"},
                Retry_After=ref("headers", "RetryAfter"),
            ),
        },
        "headers": {
            "CacheControlNoStore": {
                "description": "Token answers are never cached.",
                "required": True,
                "schema": {"const": "no-store"},
            },
            "PragmaNoCache": {
                "description": "For HTTP/1.0 caches.",
                "required": True,
                "schema": {"const": "no-cache"},
            },
            "WWWAuthenticateBearer": {
                "description": "The scheme the endpoint expects.",
                "required": True,
                "schema": {"const": "Bearer"},
            },
            "Allow": {
                "description": "The methods the path serves.",
                "required": True,
                "schema": {"type": "string"},
            },
            "RetryAfter": {
                "description": "Seconds to wait before trying again.",
                "required": True,
                "schema": {"type": "integer", "minimum": 0},
            },
            "Location": {
                "description": "Where the browser goes next.",
                "required": True,
                "schema": {"type": "string"},
            },
            "SetLoginStateCookie": {
                "description": "`login_state`: state, nonce and PKCE verifier, signed, "
                "HttpOnly, SameSite=Lax.",
                "required": True,
                "schema": {"type": "string", "pattern": "^login_state="},
            },
            "SetAuthCookie": {
                "description": f"`{cookie}`: the cookie token; HttpOnly, SameSite=Lax, Path=/, "
                "Secure unless AUTH_COOKIE_SECURE is false, Max-Age COOKIE_TOKEN_LIFETIME.",
                "required": True,
                "schema": {"type": "string"},
            },
            "ClearAuthCookie": {
                "description": f"`{cookie}=` with Max-Age=0: the browser forgets the cookie.",
                "required": True,
                "schema": {"type": "string", "pattern": f"^{re.escape(cookie)}=;"},
            },
        },
    }


TAGS = [
    {"name": "tokens", "description": "Log in, refresh the access token, revoke."},
    {"name": "resources", "description": "Examples protected by the access token and role."},
    {"name": "third-party login", "description": "OpenID Connect login ending in a cookie."},
    {"name": "operations", "description": "Probes, metrics and this document."},
]

DESCRIPTION = """\
`POST /login` issues a short-lived access token (a JWT, HS256) and a long-lived opaque
refresh token; `POST /token` renews the access token; `DELETE /token/{refreshToken}`
revokes the refresh token. Protected resources read `Authorization: Bearer <token>`.

Errors: 401 is the plain text `Unauthorized` (`Content-Type: text/plain`), with
`WWW-Authenticate: Bearer` on the Bearer endpoints; 403 is `{"message": "No access"}`;
every other error is JSON `{"message": "<what is wrong>"}`. A method a path does not
list, OPTIONS included, is 405 with `Allow` (see `MethodNotAllowed`); a path not listed
here is 404.
"""
