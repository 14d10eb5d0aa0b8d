"""The @requires_roles decorator on a route: 401 first, then 403, admin passes user (the
rule alone is tests/unit/test_roles.py's)."""

from __future__ import annotations

import pytest
from flask import g, jsonify

from app.http.guards import requires_roles
from tests.helpers.tokens import bearer, login

pytestmark = pytest.mark.signing_algorithms("HS256", "EdDSA")


@pytest.fixture
def guarded_app(app):
    calls = []

    @app.get("/guarded-admin")
    @requires_roles("admin")
    def guarded_admin():
        calls.append(g.user)
        return jsonify(seen=g.user["username"])

    @app.get("/guarded-any")
    @requires_roles()
    def guarded_any():
        calls.append(g.user)
        return jsonify(seen=g.user["username"])

    app.calls = calls
    return app


def test_view_does_not_run_without_authentication(guarded_app):
    client = guarded_app.test_client()
    assert client.get("/guarded-any").status_code == 401
    assert client.get("/guarded-admin").status_code == 401
    assert guarded_app.calls == []


def test_view_does_not_run_for_a_forbidden_role(guarded_app):
    client = guarded_app.test_client()
    token = login(client, "alice")["accessToken"]
    assert client.get("/guarded-admin", headers=bearer(token)).status_code == 403
    assert guarded_app.calls == []


def test_view_sees_verified_claims_on_g_user(guarded_app):
    client = guarded_app.test_client()
    token = login(client, "admin")["accessToken"]
    assert client.get("/guarded-admin", headers=bearer(token)).get_json() == {"seen": "admin"}
    assert guarded_app.calls[0]["role"] == "admin"
    assert set(guarded_app.calls[0]) == {"username", "role", "iat", "exp"}


def test_decorated_view_keeps_its_name(guarded_app):
    assert "guarded_admin" in guarded_app.view_functions


def test_ready_401_and_403_are_the_bytes_and_headers_of_the_raised_errors(guarded_app):
    from werkzeug.datastructures import WWWAuthenticate
    from werkzeug.exceptions import Forbidden, Unauthorized

    @guarded_app.get("/raises-401")
    def raises_401():
        raise Unauthorized(www_authenticate=WWWAuthenticate("bearer"))

    @guarded_app.get("/raises-403")
    def raises_403():
        raise Forbidden()

    client = guarded_app.test_client()
    token = login(client, "alice")["accessToken"]

    def shown(response):
        headers = sorted((k, v) for k, v in response.headers if k != "X-Request-ID")
        return response.status_code, headers, response.data

    assert shown(client.get("/guarded-admin")) == shown(client.get("/raises-401"))
    assert shown(client.get("/guarded-admin", headers=bearer(token))) == shown(
        client.get("/raises-403")
    )
    assert shown(client.get("/raises-401"))[1] == [
        ("Content-Length", "12"),
        ("Content-Type", "text/plain"),
        ("WWW-Authenticate", "Bearer"),
        ("X-Content-Type-Options", "nosniff"),  # on every answer
    ]
    assert shown(client.get("/raises-403"))[2] == b'{"message":"No access"}\n'
