"""A service that verifies the token service's access tokens itself, with the published keys.

No gateway in front: each request carries ``Authorization: Bearer <access token>``, and
this service checks it with the public keys of ``/.well-known/jwks.json`` (the token
service signs with ``SIGNING_ALGORITHM=EdDSA``; for ES256, change ``ALGORITHMS``). Flask
and PyJWT only; docs/gateway.md explains it, and tests/system/test_gateway_example.py runs it
against the real service, through a key rotation. Try it::

    SIGNING_ALGORITHM=EdDSA make run      # the token service, on 127.0.0.1:8080
    TOKEN_SERVICE_URL=http://127.0.0.1:8080 \\
        .venv/bin/flask --app docs/examples/upstream.py run --port 9000

Keys: PyJWT's ``PyJWKClient`` fetches the key set once and keeps it
``JWKS_CACHE_SECONDS``; a token naming a ``kid`` it does not hold (a key rotation) makes
it fetch the set again at once, but at most once per ``refetch_cooldown`` seconds, so a
flood of made-up kids costs the token service one request, not one each. A token is
refused (401) for a bad signature, an algorithm other than ``ALGORITHMS``, a missing
claim or an ``exp`` reached, and when its kid is in no key set; 503 when the key set
cannot be fetched: never a pass.

Issuer and audience: when the token service sets ``TOKEN_ISSUER`` and ``TOKEN_AUDIENCE``,
give this service the same ``TOKEN_ISSUER`` and its own audience in ``TOKEN_AUDIENCE``:
a token is then refused unless its ``iss`` is that issuer and its ``aud`` names that
audience, so a token minted for another service is not valid here.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import jwt
from flask import Flask, Response, g, jsonify, request

#: The one algorithm the token service signs with; a token naming any other is refused.
ALGORITHMS = ["EdDSA"]
#: The claims every access token of the token service carries.
REQUIRED_CLAIMS = ["username", "role", "iat", "exp"]
ROLES = ("admin", "user")
#: How long the key set is kept: the token service's own Cache-Control (max-age=300).
JWKS_CACHE_SECONDS = 300


def create_upstream(
    jwks_url: str,
    *,
    refetch_cooldown: float = 30.0,
    issuer: str | None = None,
    audience: str | None = None,
) -> Flask:
    """Return the example service, verifying tokens with the keys at ``jwks_url``; with
    ``issuer`` and ``audience``, only tokens whose ``iss`` and ``aud`` name them."""
    required = REQUIRED_CLAIMS + (["iss", "aud", "sub"] if issuer else [])
    app = Flask(__name__)
    keys = jwt.PyJWKClient(
        jwks_url,
        lifespan=JWKS_CACHE_SECONDS,
        timeout=5,
        cooldown_duration=refetch_cooldown,
    )

    def requires_role(*roles: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Let a view run for a valid token (else 401) whose role is listed (else 403);
        none listed: any role. An admin passes ``user``, as in the token service."""

        def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(view)
            def guarded(*args: Any, **kwargs: Any) -> Any:
                scheme, _, token = request.headers.get("Authorization", "").partition(" ")
                if scheme.lower() != "bearer" or not token:
                    return unauthorized()
                try:
                    key = keys.get_signing_key_from_jwt(token)  # by kid; refetched if unknown
                    claims = jwt.decode(
                        token,
                        key,
                        algorithms=ALGORITHMS,
                        options={"require": required},
                        issuer=issuer,  # None: not checked
                        audience=audience,  # None: a token naming any audience is refused
                    )
                except jwt.PyJWKClientConnectionError:
                    return service_unavailable()  # no keys, no answer: fail closed
                except (jwt.PyJWKClientError, jwt.InvalidTokenError):
                    return unauthorized()
                role = claims["role"]
                if role not in ROLES or not isinstance(claims["username"], str):
                    return unauthorized()
                if roles and role not in roles and not (role == "admin" and "user" in roles):
                    return jsonify(message="No access"), 403
                g.user = claims
                return view(*args, **kwargs)

            return guarded

        return decorator

    @app.get("/hello")
    @requires_role()
    def hello() -> Response:
        return jsonify(message=f"hello, {g.user['username']}", user=g.user)

    @app.get("/admin")
    @requires_role("admin")
    def admin() -> Response:
        return jsonify(message="for admins only", user=g.user)

    return app


def unauthorized() -> Response:
    return Response("Unauthorized", 401, {"WWW-Authenticate": "Bearer"}, mimetype="text/plain")


def service_unavailable() -> tuple[Response, int]:
    return jsonify(message="token service keys unavailable, try again shortly"), 503


def create_app() -> Flask:
    """Build the example for ``flask --app``: the token service at ``TOKEN_SERVICE_URL``."""
    base = os.environ.get("TOKEN_SERVICE_URL", "http://127.0.0.1:8080").rstrip("/")
    return create_upstream(
        f"{base}/.well-known/jwks.json",
        issuer=os.environ.get("TOKEN_ISSUER") or None,
        audience=os.environ.get("TOKEN_AUDIENCE") or None,
    )
