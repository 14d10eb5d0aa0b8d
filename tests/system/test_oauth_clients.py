"""The OAuth endpoints with clients no one here wrote, against a real gunicorn: Authlib's
OAuth2Session (metadata discovery, client_credentials, password, refresh_token, revocation),
a resource server on Authlib's IntrospectTokenValidator, PyJWT's PyJWKClient configured
from the metadata document alone, and the shipped curl scripts."""

from __future__ import annotations

import json
import subprocess

import jwt
import pytest
import requests
from authlib.integrations.flask_oauth2 import ResourceProtector
from authlib.integrations.requests_client import OAuth2Session, OAuthError
from authlib.oauth2.rfc6750 import InvalidTokenError
from authlib.oauth2.rfc7662 import IntrospectTokenValidator
from authlib.oauth2.rfc8414 import AuthorizationServerMetadata
from flask import Flask, jsonify

from tests.helpers.oauth import AUDIENCE, ISSUER, register
from tests.helpers.servers import Gunicorn, gunicorn_environment
from tests.helpers.tools import ROOT

pytestmark = [pytest.mark.gunicorn, pytest.mark.store("sqlite")]

METADATA = "/.well-known/oauth-authorization-server"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One gunicorn (two workers, EdDSA) with three registered clients; their secrets. Its
    PUBLIC_URL is its own loopback address, where the metadata sends the clients."""
    folder = tmp_path_factory.mktemp("oauth-server")
    clients_file = folder / "clients.json"
    secrets = {
        "billing": register(clients_file, "billing"),
        "ops": register(clients_file, "ops", role="admin"),
        "gateway": register(clients_file, "gateway"),
    }
    service = Gunicorn({}, 2, folder / "gunicorn.log")
    service.env = gunicorn_environment(
        folder,
        None,
        {
            "SIGNING_ALGORITHM": "EdDSA",
            "TOKEN_ISSUER": ISSUER,
            "TOKEN_AUDIENCE": AUDIENCE,
            "PUBLIC_URL": service.url,
            "CLIENTS_FILE": str(clients_file),
            # Authlib takes a token as expired 60 seconds early (its leeway): with the
            # default 60-second lifetime, every token would look expired on arrival
            "ACCESS_TOKEN_LIFETIME": "300",
        },
    )
    service.start()
    yield service, secrets
    service.kill()


@pytest.fixture(autouse=True)
def plain_http_on_loopback(monkeypatch):
    monkeypatch.setenv("AUTHLIB_INSECURE_TRANSPORT", "1")  # the test server is http on loopback


def discovered(url: str) -> AuthorizationServerMetadata:
    """Return the metadata as Authlib reads it, each member checked by Authlib's own rules."""
    metadata = AuthorizationServerMetadata(requests.get(url + METADATA, timeout=10).json())
    for member in (
        "issuer",
        "jwks_uri",
        "token_endpoint",
        "introspection_endpoint",
        "revocation_endpoint",
        "grant_types_supported",
        "token_endpoint_auth_methods_supported",
        "introspection_endpoint_auth_methods_supported",
        "revocation_endpoint_auth_methods_supported",
    ):
        getattr(metadata, f"validate_{member}")()
    return metadata


def test_authlib_fetches_refreshes_and_revokes_tokens_configured_by_discovery(server):
    service, secrets = server
    metadata = discovered(service.url)
    assert metadata["issuer"] == ISSUER
    for method in ("client_secret_basic", "client_secret_post"):
        session = OAuth2Session(
            "billing",
            secrets["billing"],
            token_endpoint=metadata["token_endpoint"],
            token_endpoint_auth_method=method,
        )
        token = session.fetch_token(grant_type="client_credentials")
        assert token["token_type"] == "Bearer"
        assert "refresh_token" not in token
        answer = session.get(f"{service.url}/user-accessible", timeout=10)
        assert answer.json()["user"]["username"] == "client:billing"

    user = OAuth2Session("billing", secrets["billing"], token_endpoint=metadata["token_endpoint"])
    first = user.fetch_token(username="alice", password="any")
    refreshed = user.refresh_token(metadata["token_endpoint"])
    assert refreshed["access_token"] != first["access_token"] or refreshed["expires_at"]
    assert (
        user.get(f"{service.url}/user-accessible", timeout=10).json()["user"]["username"] == "alice"
    )
    revoked = user.revoke_token(
        metadata["revocation_endpoint"], first["refresh_token"], token_type_hint="refresh_token"
    )
    assert revoked.status_code == 200
    with pytest.raises(OAuthError, match="invalid_grant"):
        user.refresh_token(metadata["token_endpoint"], refresh_token=first["refresh_token"])


def test_authlib_sees_the_negative_cases(server):
    service, secrets = server
    endpoint = discovered(service.url)["token_endpoint"]
    for client_id, secret in (("billing", "wrong"), ("nobody", secrets["billing"])):
        with pytest.raises(OAuthError, match="invalid_client"):
            OAuth2Session(client_id, secret, token_endpoint=endpoint).fetch_token(
                grant_type="client_credentials"
            )
    session = OAuth2Session("billing", secrets["billing"], token_endpoint=endpoint)
    session.fetch_token(grant_type="client_credentials")
    assert session.get(f"{service.url}/admin-accessible", timeout=10).status_code == 403
    admin = OAuth2Session("ops", secrets["ops"], token_endpoint=endpoint)
    admin.fetch_token(grant_type="client_credentials")
    assert admin.get(f"{service.url}/admin-accessible", timeout=10).status_code == 200


def test_a_resource_server_on_authlibs_introspection_validator(server):
    service, secrets = server
    metadata = discovered(service.url)

    class ServiceIntrospection(IntrospectTokenValidator):
        def introspect_token(self, token_string):
            answer = requests.post(
                metadata["introspection_endpoint"],
                data={"token": token_string, "token_type_hint": "access_token"},
                auth=("gateway", secrets["gateway"]),
                timeout=10,
            )
            answer.raise_for_status()
            return answer.json()

        def validate_token(self, token, scopes, request):
            super().validate_token(token, scopes, request)  # active, and scopes
            if token.get("token_type") != "Bearer":  # a refresh token is active too
                raise InvalidTokenError(realm=self.realm)

    protect = ResourceProtector()
    protect.register_token_validator(ServiceIntrospection())
    resource = Flask("resource")

    @resource.get("/report")
    @protect()
    def report():
        return jsonify(ok=True)

    client = resource.test_client()
    session = OAuth2Session(
        "billing", secrets["billing"], token_endpoint=metadata["token_endpoint"]
    )
    token = session.fetch_token(grant_type="client_credentials")["access_token"]
    assert client.get("/report", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    refresh_token = requests.post(
        f"{service.url}/login", json={"username": "alice", "password": "any"}, timeout=10
    ).json()["refreshToken"]
    for refused in ("x", token[:-4] + "AAAA", refresh_token):
        assert (
            client.get("/report", headers={"Authorization": f"Bearer {refused}"}).status_code == 401
        )

    # introspection without credentials, and the revocation of another client's token
    assert (
        requests.post(
            metadata["introspection_endpoint"], data={"token": token}, timeout=10
        ).status_code
        == 401
    )
    other = requests.post(
        metadata["revocation_endpoint"],
        data={"token": token},
        auth=("ops", secrets["ops"]),
        timeout=10,
    )
    assert (other.status_code, other.json()["error"]) == (400, "unsupported_token_type")
    assert client.get("/report", headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_authlib_as_a_public_client_logs_in_and_revokes_by_its_id_alone(server):
    service, _ = server
    metadata = discovered(service.url)
    assert "none" in metadata["revocation_endpoint_auth_methods_supported"]
    app = OAuth2Session(
        "mobile-app", token_endpoint=metadata["token_endpoint"], token_endpoint_auth_method="none"
    )
    token = app.fetch_token(username="alice", password="any")
    revoked = app.revoke_token(
        metadata["revocation_endpoint"], token["refresh_token"], token_type_hint="refresh_token"
    )
    assert revoked.status_code == 200
    with pytest.raises(OAuthError, match="invalid_grant"):
        app.refresh_token(metadata["token_endpoint"], refresh_token=token["refresh_token"])


def test_pyjwt_verifies_a_token_with_keys_and_claims_from_the_metadata_alone(server):
    service, secrets = server
    metadata = requests.get(service.url + METADATA, timeout=10).json()
    keys = jwt.PyJWKClient(metadata["jwks_uri"])
    token = requests.post(
        metadata["token_endpoint"],
        data={"grant_type": "client_credentials"},
        auth=("billing", secrets["billing"]),
        timeout=10,
    ).json()["access_token"]
    claims = jwt.decode(
        token,
        keys.get_signing_key_from_jwt(token),
        algorithms=metadata["access_token_signing_alg_values_supported"],
        issuer=metadata["issuer"],
        audience=AUDIENCE,
        options={"require": ["iss", "aud", "sub", "exp", "jti"]},
    )
    assert claims["sub"] == "client:billing"
    with pytest.raises(jwt.InvalidAudienceError):
        jwt.decode(
            token,
            keys.get_signing_key_from_jwt(token),
            algorithms=metadata["access_token_signing_alg_values_supported"],
            issuer=metadata["issuer"],
            audience="https://another.example.com",
        )


def test_the_upstream_example_checks_issuer_and_audience(server):
    import importlib.util

    service, secrets = server
    spec = importlib.util.spec_from_file_location(
        "upstream_example", ROOT / "docs/examples/upstream.py"
    )
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    jwks = f"{service.url}/.well-known/jwks.json"
    ours = example.create_upstream(jwks, issuer=ISSUER, audience=AUDIENCE).test_client()
    elsewhere = example.create_upstream(jwks, issuer=ISSUER, audience="https://other.example.com")
    token = requests.post(
        f"{service.url}/oauth/token",
        data={"grant_type": "client_credentials"},
        auth=("billing", secrets["billing"]),
        timeout=10,
    ).json()["access_token"]
    headers = {"Authorization": f"Bearer {token}"}
    assert ours.get("/hello", headers=headers).status_code == 200
    assert elsewhere.test_client().get("/hello", headers=headers).status_code == 401


def script(name: str, *args: str, base_url: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / name), *args],
        env={"PATH": "/usr/bin:/bin", "BASE_URL": base_url, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_oauth_scripts_run_against_the_service(server):
    service, secrets = server
    billing = {"CLIENT_ID": "billing", "CLIENT_SECRET": secrets["billing"]}
    metadata = script("oauth-metadata.sh", base_url=service.url)
    assert (metadata.returncode, metadata.stderr) == (0, "")
    assert json.loads(metadata.stdout)["issuer"] == ISSUER
    issued = script("client-token.sh", base_url=service.url, **billing)
    assert (issued.returncode, issued.stderr) == (0, "")
    token = json.loads(issued.stdout)["access_token"]
    gateway = {"CLIENT_ID": "gateway", "CLIENT_SECRET": secrets["gateway"]}
    introspected = script("introspect.sh", base_url=service.url, TOKEN=token, **gateway)
    assert json.loads(introspected.stdout)["client_id"] == "billing"
    login = requests.post(f"{service.url}/login", json={"username": "bob"}, timeout=10).json()
    revoked = script("oauth-revoke.sh", base_url=service.url, TOKEN=login["refreshToken"])
    assert (revoked.returncode, revoked.stdout, revoked.stderr) == (0, "", "")
    inactive = script("introspect.sh", base_url=service.url, TOKEN=login["refreshToken"], **gateway)
    assert inactive.stdout == '{"active":false}\n'
    wrong = script("client-token.sh", base_url=service.url, CLIENT_ID="billing", CLIENT_SECRET="x")
    assert wrong.returncode == 1
    assert "invalid_client" in wrong.stderr
    assert secrets["billing"] not in wrong.stderr + issued.stderr
