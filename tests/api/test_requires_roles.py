"""The @requires_roles decorator on its own: 401 first, then 403, admin passes user."""

from __future__ import annotations

import pytest
from flask import g, jsonify

from app.http.guards import requires_roles, role_allows
from tests.helpers.tokens import bearer, login

pytestmark = pytest.mark.signing_algorithms("HS256", "EdDSA")


@pytest.mark.parametrize(
    ("role", "required", "allowed"),
    [
        ("user", (), True),
        ("admin", (), True),
        ("user", ("user",), True),
        ("admin", ("user",), True),
        ("user", ("admin",), False),
        ("admin", ("admin",), True),
        ("user", ("admin", "user"), True),
    ],
)
def test_role_rule(role, required, allowed):
    assert role_allows(role, required) is allowed


def test_unknown_role_is_refused_when_decorating():
    with pytest.raises(ValueError, match="unknown roles"):
        requires_roles("superuser")


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
