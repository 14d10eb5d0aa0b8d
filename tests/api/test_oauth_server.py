"""The OAuth endpoints: server metadata (RFC 8414), /oauth/token (RFC 6749), introspection
(RFC 7662) and revocation (RFC 7009), every error path, and `flask clients`."""

from __future__ import annotations

import base64
import json
import time

import jwt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openapi_spec_validator import validate as validate_spec

from app.extensions import TOKEN_STORE
from app.oauth.clients import read_clients_file, secret_digest
from app.oauth.credentials import basic_credentials
from app.oauth.errors import OAuthError
from tests.helpers.clock import ManualClock
from tests.helpers.oauth import AUDIENCE, ISSUER, basic, register
from tests.helpers.openapi import assert_documented, document_of, documented, routed
from tests.helpers.tokens import assert_unauthorized, bearer, login

pytestmark = pytest.mark.store("sqlite")

TOKEN, INTROSPECT, REVOKE = "/oauth/token", "/oauth/introspect", "/oauth/revoke"
METADATA = "/.well-known/oauth-authorization-server"
CREDENTIALS = {"grant_type": "client_credentials"}


@pytest.fixture
def clients_file(tmp_path):
    return tmp_path / "clients.json"


@pytest.fixture
def secrets(clients_file):
    return {
        "svc": register(clients_file, "svc"),
        "ops": register(clients_file, "ops", role="admin"),
        "rs": register(clients_file, "rs"),
    }


@pytest.fixture
def oauth_app(make_app, clients_file, secrets):
    return make_app(
        CLIENTS_FILE=str(clients_file), TOKEN_ISSUER=ISSUER, TOKEN_AUDIENCE=f"{AUDIENCE},reports"
    )


@pytest.fixture
def oauth(oauth_app):
    return oauth_app.test_client()


def client_token(oauth, secrets, client_id="svc", **fields):
    answer = oauth.post(
        TOKEN, data={**CREDENTIALS, **fields}, headers=basic(client_id, secrets[client_id])
    )
    assert answer.status_code == 200, answer.data
    return answer.get_json()["access_token"]


def introspect(oauth, secrets, token, client_id="rs", **fields):
    return oauth.post(
        INTROSPECT, data={"token": token, **fields}, headers=basic(client_id, secrets[client_id])
    )


def assert_oauth_error(answer, status, error):
    assert answer.status_code == status, answer.data
    assert answer.mimetype == "application/json"
    assert answer.get_json()["error"] == error
    assert set(answer.get_json()) == {"error", "error_description"}
    assert answer.headers["Cache-Control"] == "no-store"
    if status == 401:
        assert answer.headers["WWW-Authenticate"] == 'Basic realm="oauth"'


# Opt-in: without the settings, the paths are what they were.


def test_without_the_settings_every_oauth_path_is_the_404_it_was(client):
    for path in (METADATA, TOKEN, INTROSPECT, REVOKE):
        for method in ("GET", "POST"):
            answer = client.open(path, method=method, data=CREDENTIALS)
            unknown = client.open("/no-such-path", method=method, data=CREDENTIALS)
            assert answer.status_code == 404, (method, path)
            assert answer.data == unknown.data
            shown = {name for name, _ in answer.headers} - {"X-Request-ID"}
            assert {name: answer.headers[name] for name in shown} == {
                name: unknown.headers[name] for name in shown
            }


def test_without_clients_file_a_client_prefixed_username_still_logs_in(client):
    assert login(client, "client:svc")["accessToken"]


# Server metadata


def test_metadata_names_the_endpoints_grants_methods_and_algorithms(oauth):
    answer = oauth.get(METADATA)
    assert answer.status_code == 200
    document = answer.get_json()
    assert document["issuer"] == ISSUER
    assert document["token_endpoint"] == f"{ISSUER}/oauth/token"
    assert document["introspection_endpoint"] == f"{ISSUER}/oauth/introspect"
    assert document["revocation_endpoint"] == f"{ISSUER}/oauth/revoke"
    assert document["grant_types_supported"] == ["client_credentials", "password", "refresh_token"]
    methods = ["client_secret_basic", "client_secret_post"]
    assert document["token_endpoint_auth_methods_supported"] == [*methods, "none"]
    assert document["introspection_endpoint_auth_methods_supported"] == methods
    assert document["revocation_endpoint_auth_methods_supported"] == [*methods, "none"]
    assert document["access_token_signing_alg_values_supported"] == ["HS256"]
    assert "jwks_uri" not in document  # a secret is never published
    assert answer.headers["Cache-Control"] == "public, max-age=300"


def test_metadata_uses_public_url_and_lists_no_endpoint_without_clients(make_app):
    app = make_app(
        TOKEN_ISSUER=ISSUER, TOKEN_AUDIENCE=AUDIENCE, PUBLIC_URL="https://auth.example.com"
    )
    document = app.test_client().get(METADATA).get_json()
    assert document == {
        "issuer": ISSUER,
        "grant_types_supported": [],  # absent, it would mean authorization_code and implicit
        "response_types_supported": [],
        "access_token_signing_alg_values_supported": ["HS256"],
    }
    assert app.test_client().post(TOKEN, data=CREDENTIALS).status_code == 404


@pytest.mark.parametrize("public_url", [None, "https://tokens.example.net/"])
def test_metadata_endpoints_never_follow_the_request_s_host(make_app, clients_file, public_url):
    settings = {"PUBLIC_URL": public_url} if public_url else {}
    app = make_app(
        CLIENTS_FILE=str(clients_file), TOKEN_ISSUER=ISSUER, TOKEN_AUDIENCE=AUDIENCE, **settings
    )
    base = (public_url or ISSUER).rstrip("/")
    for host in ("evil.example", "localhost:8080"):
        document = app.test_client().get(METADATA, headers={"Host": host}).get_json()
        assert document["token_endpoint"] == f"{base}/oauth/token"
        assert document["introspection_endpoint"] == f"{base}/oauth/introspect"
        assert document["revocation_endpoint"] == f"{base}/oauth/revoke"


def test_an_issuer_with_a_path_has_the_metadata_at_rfc_8414_s_path_for_it(make_app):
    client = make_app(
        TOKEN_ISSUER="https://example.com/auth/", TOKEN_AUDIENCE=AUDIENCE
    ).test_client()
    answer = client.get(f"{METADATA}/auth")
    assert answer.status_code == 200
    assert answer.get_json() == client.get(METADATA).get_json()
    assert answer.get_json()["issuer"] == "https://example.com/auth/"
    other = make_app(TOKEN_ISSUER=ISSUER, TOKEN_AUDIENCE=AUDIENCE).test_client()
    assert other.get(f"{METADATA}/auth").status_code == 404


@pytest.mark.parametrize("signing_algorithm", ["EdDSA"], indirect=True)
def test_metadata_names_the_key_set_when_one_is_published(oauth):
    document = oauth.get(METADATA).get_json()
    assert document["jwks_uri"] == f"{ISSUER}/.well-known/jwks.json"
    assert document["access_token_signing_alg_values_supported"] == ["EdDSA"]


# client_credentials


def test_client_credentials_by_basic_gives_rfc_6749_json_and_a_client_token(
    oauth, secrets, signing_key
):
    answer = oauth.post(TOKEN, data=CREDENTIALS, headers=basic("svc", secrets["svc"]))
    assert answer.status_code == 200
    body = answer.get_json()
    assert set(body) == {"access_token", "token_type", "expires_in"}
    assert body["token_type"] == "Bearer"
    assert body["expires_in"] == 60
    assert answer.headers["Cache-Control"] == "no-store"
    assert answer.headers["Pragma"] == "no-cache"
    claims = signing_key.decode(body["access_token"], audience=AUDIENCE, issuer=ISSUER)
    assert claims["username"] == claims["sub"] == "client:svc"
    assert claims["role"] == "user"


def test_client_credentials_in_the_form_body(oauth, secrets):
    answer = oauth.post(
        TOKEN, data={**CREDENTIALS, "client_id": "svc", "client_secret": secrets["svc"]}
    )
    assert answer.status_code == 200


def test_basic_credentials_are_form_decoded_before_the_split():
    raw = base64.b64encode(b"svc:a%3Ab+c").decode()
    assert basic_credentials(f"Basic {raw}") == ("svc", "a:b c")
    assert basic_credentials("Bearer x") is None


def test_a_client_token_passes_the_protected_endpoints_by_its_role(oauth, secrets):
    user_token, admin_token = client_token(oauth, secrets), client_token(oauth, secrets, "ops")
    answer = oauth.get("/user-accessible", headers=bearer(user_token))
    assert answer.status_code == 200
    assert answer.get_json()["user"]["username"] == "client:svc"
    assert oauth.get("/admin-accessible", headers=bearer(user_token)).status_code == 403
    assert oauth.get("/admin-accessible", headers=bearer(admin_token)).status_code == 200
    assert oauth.get("/auth/check?role=admin", headers=bearer(user_token)).status_code == 403
    check = oauth.get("/auth/check", headers=bearer(user_token))
    assert check.headers["X-Auth-Request-User"] == "client%3Asvc"


def test_a_client_with_its_own_audience_gets_tokens_for_it(make_app, clients_file, signing_key):
    secret = register(clients_file, "rep", audiences=["reports"])
    app = make_app(
        CLIENTS_FILE=str(clients_file), TOKEN_ISSUER=ISSUER, TOKEN_AUDIENCE=f"{AUDIENCE},reports"
    )
    answer = app.test_client().post(TOKEN, data=CREDENTIALS, headers=basic("rep", secret))
    assert (
        signing_key.decode(answer.get_json()["access_token"], audience="reports")["aud"]
        == "reports"
    )


TOKEN_ERRORS = [
    pytest.param(basic("svc", "wrong"), CREDENTIALS, 401, "invalid_client", id="wrong-secret"),
    pytest.param(basic("nobody", "x"), CREDENTIALS, 401, "invalid_client", id="unknown-client"),
    pytest.param({}, CREDENTIALS, 401, "invalid_client", id="no-authentication"),
    pytest.param({}, {**CREDENTIALS, "client_id": "svc"}, 401, "invalid_client", id="public"),
    pytest.param(bearer("x.y.z"), CREDENTIALS, 401, "invalid_client", id="bearer-scheme"),
    pytest.param({"Authorization": "Basic !!"}, CREDENTIALS, 401, "invalid_client", id="bad-b64"),
    pytest.param(
        {"Authorization": "Basic " + base64.b64encode(b"svc").decode()},
        CREDENTIALS,
        401,
        "invalid_client",
        id="no-colon",
    ),
    pytest.param(
        basic("svc", "x"),
        {**CREDENTIALS, "client_id": "svc", "client_secret": "x"},
        400,
        "invalid_request",
        id="two-methods",
    ),
    pytest.param(
        basic("svc", "x"),
        {**CREDENTIALS, "client_id": "ops"},
        400,
        "invalid_request",
        id="two-client-ids",
    ),
    pytest.param(
        {},
        {"grant_type": "password", "username": "alice", "password": "p", "client_id": "svc"},
        401,
        "invalid_client",
        id="registered-client-as-public",
    ),
    pytest.param({}, {"grant_type": "implicit"}, 400, "unsupported_grant_type", id="grant"),
    pytest.param({}, {}, 400, "invalid_request", id="no-grant-type"),
    pytest.param({}, {"grant_type": ["a", "b"]}, 400, "invalid_request", id="grant-twice"),
    pytest.param({}, {"grant_type": "password"}, 400, "invalid_request", id="no-username"),
    pytest.param({}, {"grant_type": "refresh_token"}, 400, "invalid_request", id="no-token"),
    pytest.param(
        {},
        {"grant_type": "refresh_token", "refresh_token": "x" * 42},
        400,
        "invalid_grant",
        id="unknown-refresh-token",
    ),
    pytest.param(
        {},
        {"grant_type": "password", "username": "client:svc", "password": "p"},
        400,
        "invalid_request",
        id="client-namespace",
    ),
]


def test_token_errors_follow_rfc_6749(oauth, secrets):
    for case in TOKEN_ERRORS:
        headers, data, status, error = case.values
        answer = oauth.post(TOKEN, data=data, headers=headers)
        assert answer.status_code == status, case.id
        assert_oauth_error(answer, status, error)


def test_a_json_body_or_a_scope_is_refused(oauth, secrets):
    answer = oauth.post(TOKEN, json=CREDENTIALS, headers=basic("svc", secrets["svc"]))
    assert_oauth_error(answer, 400, "invalid_request")
    answer = oauth.post(
        TOKEN, data={**CREDENTIALS, "scope": "a"}, headers=basic("svc", secrets["svc"])
    )
    assert_oauth_error(answer, 400, "invalid_scope")


def test_failed_secrets_are_limited_per_client_id_and_the_right_one_still_passes(
    make_app, clients_file, secrets
):
    oauth = make_app(
        CLIENTS_FILE=str(clients_file), LOGIN_FAILURE_LIMIT="2 per minute"
    ).test_client()
    wrong = basic("svc", "wrong")
    assert oauth.post(TOKEN, data=CREDENTIALS, headers=wrong).status_code == 401
    assert oauth.post(TOKEN, data=CREDENTIALS, headers=wrong).status_code == 401
    limited = oauth.post(TOKEN, data=CREDENTIALS, headers=wrong)
    assert limited.status_code == 429
    assert int(limited.headers["Retry-After"]) >= 1
    assert oauth.post(TOKEN, data=CREDENTIALS, headers=basic("ops", "w")).status_code == 401
    assert (
        oauth.post(TOKEN, data=CREDENTIALS, headers=basic("svc", secrets["svc"])).status_code == 200
    )


def test_the_login_and_the_user_directory_refuse_the_client_namespace(
    make_app, clients_file, tmp_path
):
    app = make_app(CLIENTS_FILE=str(clients_file), USERS_FILE=str(tmp_path / "users.json"))
    answer = app.test_client().post("/login", json={"username": "client:svc", "password": "p"})
    assert answer.status_code == 400
    assert answer.get_json() == {"message": "username must not start with 'client:'"}
    result = app.test_cli_runner().invoke(args=["users", "add", "client:svc"], input="password1\n")
    assert result.exit_code == 2
    assert "registered clients" in result.output


# password and refresh_token, over the store of /login and /token


def test_password_then_refresh_token_grants_work_end_to_end(oauth, signing_key):
    answer = oauth.post(
        TOKEN, data={"grant_type": "password", "username": "alice", "password": "p"}
    )
    assert answer.status_code == 200
    body = answer.get_json()
    assert set(body) == {"access_token", "token_type", "expires_in", "refresh_token"}
    assert len(body["refresh_token"]) == 42
    assert signing_key.decode(body["access_token"], audience=AUDIENCE)["username"] == "alice"
    again = oauth.post(
        TOKEN, data={"grant_type": "refresh_token", "refresh_token": body["refresh_token"]}
    )
    assert again.status_code == 200
    assert set(again.get_json()) == {"access_token", "token_type", "expires_in"}
    spec = oauth.post("/token", json={"username": "alice", "refreshToken": body["refresh_token"]})
    assert spec.status_code == 200  # the same store as SPEC.md's /token


def test_refresh_token_grant_rotates_with_rotation(make_app, clients_file, secrets):
    oauth = make_app(CLIENTS_FILE=str(clients_file), REFRESH_TOKEN_ROTATION="true").test_client()
    first = login(oauth)["refreshToken"]
    answer = oauth.post(TOKEN, data={"grant_type": "refresh_token", "refresh_token": first})
    successor = answer.get_json()["refresh_token"]
    assert successor != first
    reused = oauth.post(TOKEN, data={"grant_type": "refresh_token", "refresh_token": first})
    assert_oauth_error(reused, 400, "invalid_grant")


def test_a_reuse_at_the_refresh_grant_ends_the_family_as_post_token_does(
    make_app, clients_file, capfd
):
    oauth = make_app(CLIENTS_FILE=str(clients_file), REFRESH_TOKEN_ROTATION="true").test_client()
    first = login(oauth)["refreshToken"]
    grant = {"grant_type": "refresh_token", "refresh_token": first}
    successor = oauth.post(TOKEN, data=grant).get_json()["refresh_token"]
    capfd.readouterr()
    assert_oauth_error(oauth.post(TOKEN, data=grant), 400, "invalid_grant")  # the thief's, or ours
    (line,) = [json.loads(line) for line in capfd.readouterr().out.splitlines()]
    assert (line["event"], line["user"], line["reason"]) == (
        "refresh_token_reuse",
        "alice",
        "reused_refresh_token",
    )
    for presented in (successor, first):  # the whole family is over, at both paths
        again = {"grant_type": "refresh_token", "refresh_token": presented}
        assert_oauth_error(oauth.post(TOKEN, data=again), 400, "invalid_grant")
        body = {"username": "alice", "refreshToken": presented}
        assert_unauthorized(oauth.post("/token", json=body))


def test_a_retry_within_the_grace_at_the_refresh_grant_replaces_the_unused_successor(
    make_app, clients_file
):
    oauth = make_app(
        CLIENTS_FILE=str(clients_file),
        REFRESH_TOKEN_ROTATION="true",
        REFRESH_TOKEN_REUSE_GRACE="30",
    ).test_client()
    first = login(oauth)["refreshToken"]
    grant = {"grant_type": "refresh_token", "refresh_token": first}
    lost = oauth.post(TOKEN, data=grant).get_json()["refresh_token"]
    retried = oauth.post(TOKEN, data=grant)  # the answer was lost: the client tries again
    assert retried.status_code == 200
    kept = retried.get_json()["refresh_token"]
    assert kept != lost
    again = oauth.post(TOKEN, data={"grant_type": "refresh_token", "refresh_token": kept})
    assert again.status_code == 200
    assert oauth.post("/token", json={"username": "alice", "refreshToken": lost}).status_code == 401


def test_password_grant_checks_the_user_directory(make_app, clients_file, tmp_path):
    app = make_app(CLIENTS_FILE=str(clients_file), USERS_FILE=str(tmp_path / "users.json"))
    app.test_cli_runner().invoke(args=["users", "add", "alice"], input="password1\n")
    oauth = app.test_client()
    wrong = oauth.post(TOKEN, data={"grant_type": "password", "username": "alice", "password": "x"})
    assert_oauth_error(wrong, 400, "invalid_grant")
    right = {"grant_type": "password", "username": "alice", "password": "password1"}
    assert oauth.post(TOKEN, data=right).status_code == 200
    assert_oauth_error(
        oauth.post(TOKEN, data={"grant_type": "password", "username": "alice"}),
        400,
        "invalid_request",
    )


def test_a_confidential_client_must_authenticate_for_a_password_grant(oauth):
    data = {"grant_type": "password", "username": "alice", "password": "p"}
    assert_oauth_error(
        oauth.post(TOKEN, data=data, headers=basic("svc", "bad")), 401, "invalid_client"
    )


def test_a_registered_client_naming_itself_without_its_secret_is_refused_everywhere(oauth):
    refresh_token = login(oauth)["refreshToken"]
    for data in (
        {"grant_type": "password", "username": "alice", "password": "p", "client_id": "svc"},
        {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": "svc"},
    ):
        assert_oauth_error(oauth.post(TOKEN, data=data), 401, "invalid_client")
    answer = oauth.post(REVOKE, data={"token": refresh_token, "client_id": "svc"})
    assert_oauth_error(answer, 401, "invalid_client")
    assert (
        oauth.post("/token", json={"username": "alice", "refreshToken": refresh_token}).status_code
        == 200
    )


def test_a_public_client_gets_and_revokes_tokens_by_its_id_alone(oauth, secrets):
    metadata = oauth.get(METADATA).get_json()
    assert "none" in metadata["token_endpoint_auth_methods_supported"]
    assert "none" in metadata["revocation_endpoint_auth_methods_supported"]
    assert "none" not in metadata["introspection_endpoint_auth_methods_supported"]
    data = {"grant_type": "password", "username": "alice", "password": "p", "client_id": "app"}
    answer = oauth.post(TOKEN, data=data)
    assert answer.status_code == 200, answer.data
    refresh_token = answer.get_json()["refresh_token"]
    revoked = oauth.post(REVOKE, data={"token": refresh_token, "client_id": "app"})
    assert revoked.status_code == 200
    assert introspect(oauth, secrets, refresh_token).get_json() == {"active": False}
    assert_oauth_error(  # a public client cannot introspect
        oauth.post(INTROSPECT, data={"token": refresh_token, "client_id": "app"}),
        401,
        "invalid_client",
    )


def test_a_parameter_sent_without_a_value_counts_as_omitted(oauth, secrets):
    data = {"grant_type": "password", "username": "alice", "password": "p"}
    public = oauth.post(TOKEN, data={**data, "client_id": "app", "client_secret": ""})
    assert public.status_code == 200
    assert oauth.post(TOKEN, data={**data, "client_id": "", "scope": ""}).status_code == 200
    by_basic = {**CREDENTIALS, "client_secret": "", "scope": ""}
    answer = oauth.post(TOKEN, data=by_basic, headers=basic("svc", secrets["svc"]))
    assert answer.status_code == 200
    assert_oauth_error(oauth.post(TOKEN, data={"grant_type": ""}), 400, "invalid_request")


def test_an_unsupported_grant_type_names_the_supported_ones(oauth):
    answer = oauth.post(TOKEN, data={"grant_type": "implicit"})
    assert_oauth_error(answer, 400, "unsupported_grant_type")
    description = answer.get_json()["error_description"]
    assert description == "grant_type must be one of client_credentials, password, refresh_token"


# Introspection


def test_introspection_of_an_access_token_reads_no_store(oauth_app, oauth, secrets):
    token = login(oauth)["accessToken"]
    store = oauth_app.extensions[TOKEN_STORE]

    class NoStore:
        def __getattr__(self, name):
            raise AssertionError(f"introspection read the store: {name}")

    oauth_app.extensions[TOKEN_STORE] = NoStore()
    try:
        answer = introspect(oauth, secrets, token)
    finally:
        oauth_app.extensions[TOKEN_STORE] = store
    body = answer.get_json()
    assert answer.status_code == 200
    assert body["active"] is True
    assert body["token_type"] == "Bearer"
    assert body["username"] == body["sub"] == "alice"
    assert body["role"] == "user"
    assert body["iss"] == ISSUER
    assert {"iat", "exp", "jti", "aud"} <= set(body)
    assert "client_id" not in body


def test_introspection_of_a_client_token_names_the_client(oauth, secrets):
    body = introspect(oauth, secrets, client_token(oauth, secrets, "ops")).get_json()
    assert body["client_id"] == "ops"
    assert body["role"] == "admin"


def test_introspection_of_a_refresh_token(oauth, secrets):
    before = int(time.time())
    refresh_token = login(oauth, "admin")["refreshToken"]
    body = introspect(oauth, secrets, refresh_token, token_type_hint="refresh_token").get_json()
    assert before <= body.pop("iat") <= time.time()
    assert body == {  # no exp: refresh tokens have no lifetime by default
        "active": True,
        "token_type": "refresh_token",
        "username": "admin",
        "sub": "admin",
        "role": "admin",
    }
    oauth.delete(f"/token/{refresh_token}")
    assert introspect(oauth, secrets, refresh_token).get_json() == {"active": False}


def test_introspection_of_a_refresh_token_with_a_lifetime_gives_its_expiry(
    make_app, clients_file, secrets
):
    oauth = make_app(CLIENTS_FILE=str(clients_file), REFRESH_TOKEN_LIFETIME="3600").test_client()
    refresh_token = login(oauth)["refreshToken"]
    body = introspect(oauth, secrets, refresh_token).get_json()
    assert body["exp"] == body["iat"] + 3600


def test_tokens_of_a_user_logged_out_everywhere_are_inactive(oauth, secrets):
    tokens = login(oauth)
    assert introspect(oauth, secrets, tokens["accessToken"]).get_json()["active"] is True
    headers = {"Authorization": f"Bearer {tokens['accessToken']}"}
    assert oauth.delete("/sessions", headers=headers).status_code == 200
    for token in (tokens["accessToken"], tokens["refreshToken"]):
        assert introspect(oauth, secrets, token).get_json() == {"active": False}


def test_an_expired_access_token_is_inactive_and_nothing_else(make_app, clients_file, secrets):
    clock = ManualClock()
    oauth = make_app(clock=clock, CLIENTS_FILE=str(clients_file)).test_client()
    token = login(oauth)["accessToken"]
    clock.advance(60)
    assert introspect(oauth, secrets, token).get_json() == {"active": False}


@pytest.mark.parametrize(
    "token",
    ["x", "a.b.c", "x" * 9000, "é" * 42, "eyJhbGciOiJIUzI1NiJ9.e30.", "0" * 42],
)
def test_foreign_or_unknown_tokens_are_inactive(oauth, secrets, token):
    answer = introspect(oauth, secrets, token)
    assert answer.status_code == 200
    assert answer.get_json() == {"active": False}


def test_a_token_of_another_issuer_is_inactive(make_app, clients_file, secrets):
    other = make_app(TOKEN_ISSUER="https://other.example.com", TOKEN_AUDIENCE=AUDIENCE)
    foreign = login(other.test_client())["accessToken"]
    oauth = make_app(CLIENTS_FILE=str(clients_file), TOKEN_ISSUER=ISSUER, TOKEN_AUDIENCE=AUDIENCE)
    assert introspect(oauth.test_client(), secrets, foreign).get_json() == {"active": False}


@pytest.mark.parametrize(
    "headers", [{}, basic("rs", "wrong"), basic("nobody", "x")], ids=["none", "wrong", "unknown"]
)
def test_introspection_needs_a_registered_client(oauth, secrets, headers):
    answer = oauth.post(INTROSPECT, data={"token": "x"}, headers=headers)
    assert_oauth_error(answer, 401, "invalid_client")


def test_introspection_without_a_token_is_invalid_request(oauth, secrets):
    answer = oauth.post(INTROSPECT, data={}, headers=basic("rs", secrets["rs"]))
    assert_oauth_error(answer, 400, "invalid_request")


# Revocation


def test_the_holder_revokes_a_refresh_token_as_delete_token_does(oauth, secrets):
    refresh_token = login(oauth)["refreshToken"]
    answer = oauth.post(REVOKE, data={"token": refresh_token, "token_type_hint": "refresh_token"})
    assert answer.status_code == 200
    assert answer.data == b""
    assert (
        oauth.post("/token", json={"username": "alice", "refreshToken": refresh_token}).status_code
        == 401
    )
    assert oauth.post(REVOKE, data={"token": refresh_token}).status_code == 200  # unknown: 200


def test_revoking_an_old_rotated_token_ends_its_family_and_logs_the_reuse(
    make_app, clients_file, secrets, capfd
):
    oauth = make_app(CLIENTS_FILE=str(clients_file), REFRESH_TOKEN_ROTATION="true").test_client()
    first = login(oauth)["refreshToken"]
    newest = oauth.post("/token", json={"username": "alice", "refreshToken": first})
    newest = newest.get_json()["refreshToken"]
    capfd.readouterr()
    assert oauth.post(REVOKE, data={"token": first}).status_code == 200
    (line,) = [json.loads(line) for line in capfd.readouterr().out.splitlines()]
    assert (line["event"], line["user"]) == ("refresh_token_reuse", "alice")
    assert_unauthorized(oauth.post("/token", json={"username": "alice", "refreshToken": newest}))


def test_a_registered_client_revokes_a_refresh_token(oauth, secrets):
    refresh_token = login(oauth)["refreshToken"]
    answer = oauth.post(REVOKE, data={"token": refresh_token}, headers=basic("rs", secrets["rs"]))
    assert answer.status_code == 200
    assert introspect(oauth, secrets, refresh_token).get_json() == {"active": False}


def test_a_valid_access_token_is_never_answered_as_revoked(oauth, secrets):
    # another client's token, and a user's own: RFC 7009's unsupported_token_type, not a 200
    # that a caller would take for a revocation; each stays valid until its exp
    token = client_token(oauth, secrets, "svc")
    answer = oauth.post(REVOKE, data={"token": token}, headers=basic("ops", secrets["ops"]))
    assert_oauth_error(answer, 400, "unsupported_token_type")
    assert introspect(oauth, secrets, token).get_json()["active"] is True
    own = login(oauth)["accessToken"]
    answer = oauth.post(REVOKE, data={"token": own, "token_type_hint": "access_token"})
    assert_oauth_error(answer, 400, "unsupported_token_type")
    assert oauth.get("/user-accessible", headers=bearer(own)).status_code == 200


@pytest.mark.parametrize("token", ["x.y.z", "a.b", "eyJhbGciOiJIUzI1NiJ9.e30.", "foreign"])
def test_a_token_that_is_not_valid_here_is_revoked_as_far_as_anyone_can_tell(oauth, token):
    if token == "foreign":  # well formed, signed with another key
        claims = {"username": "alice", "role": "admin", "iat": int(time.time())}
        token = jwt.encode({**claims, "exp": claims["iat"] + 600}, "k" * 64, algorithm="HS256")
    assert oauth.post(REVOKE, data={"token": token}).status_code == 200


def test_revocation_with_wrong_credentials_or_no_token(oauth, secrets):
    assert_oauth_error(
        oauth.post(REVOKE, data={"token": "x"}, headers=basic("rs", "wrong")), 401, "invalid_client"
    )
    assert_oauth_error(oauth.post(REVOKE, data={}), 400, "invalid_request")


# flask clients


def test_flask_clients_add_list_rotate_remove(make_app, tmp_path):
    path = tmp_path / "cli-clients.json"
    runner = make_app(
        CLIENTS_FILE=str(path), TOKEN_ISSUER=ISSUER, TOKEN_AUDIENCE=f"{AUDIENCE},reports"
    ).test_cli_runner()
    added = runner.invoke(
        args=["clients", "add", "svc", "--role", "admin", "--audience", "reports"]
    )
    assert added.exit_code == 0, added.output
    secret = added.stdout.strip()
    assert len(secret) == 43  # 256 bits, base64url
    stored = read_clients_file(str(path))["svc"]
    assert stored.secret_sha256 == secret_digest(secret)
    assert secret not in path.read_text()
    assert path.stat().st_mode & 0o777 == 0o600
    listed = runner.invoke(args=["clients", "list"])
    assert listed.stdout == "svc\tadmin\treports\n"
    assert runner.invoke(args=["clients", "add", "svc"]).exit_code == 1
    rotated = runner.invoke(args=["clients", "rotate-secret", "svc"])
    assert rotated.exit_code == 0
    assert read_clients_file(str(path))["svc"].secret_sha256 == secret_digest(
        rotated.stdout.strip()
    )
    assert runner.invoke(args=["clients", "remove", "svc"]).exit_code == 0
    assert runner.invoke(args=["clients", "remove", "svc"]).exit_code == 1
    assert runner.invoke(args=["clients", "rotate-secret", "svc"]).exit_code == 1


def test_a_grant_in_the_second_of_a_new_secret_waits_and_its_token_works(
    make_app, clients_file, secrets
):
    clock = ManualClock()
    app = make_app(clock=clock, CLIENTS_FILE=str(clients_file))
    oauth = app.test_client()
    rotated = app.test_cli_runner().invoke(args=["clients", "rotate-secret", "svc"])
    assert rotated.exit_code == 0, rotated.output
    issued_in = int(clock())
    token = client_token(oauth, {"svc": rotated.stdout.strip()})
    assert int(clock()) == issued_in + 1  # it waited out the cut-off's second
    assert oauth.get("/user-accessible", headers=bearer(token)).status_code == 200


@pytest.mark.parametrize("command", ["remove", "rotate-secret"])
def test_the_old_secret_gets_no_token_in_the_second_of_its_cut_off(
    make_app, clients_file, secrets, command
):
    clock = ManualClock()
    app = make_app(clock=clock, CLIENTS_FILE=str(clients_file))
    oauth = app.test_client()
    client_token(oauth, secrets)  # the file read: the next look is a second away
    changed = app.test_cli_runner().invoke(args=["clients", command, "svc"])
    assert changed.exit_code == 0, changed.output
    answer = oauth.post(TOKEN, data=CREDENTIALS, headers=basic("svc", secrets["svc"]))
    assert_oauth_error(answer, 401, "invalid_client")


@pytest.mark.parametrize("command", ["remove", "rotate-secret"])
def test_a_removed_client_or_a_new_secret_cuts_off_the_client_s_tokens(
    oauth_app, oauth, secrets, command
):
    token = client_token(oauth, secrets, "ops")
    headers = {"Authorization": f"Bearer {token}"}
    assert oauth.get("/admin-accessible", headers=headers).status_code == 200
    result = oauth_app.test_cli_runner().invoke(args=["clients", command, "ops"])
    assert result.exit_code == 0, result.output
    said = result.stderr if command == "rotate-secret" else result.stdout
    assert "access tokens issued until now are refused" in said
    assert_unauthorized(oauth.get("/admin-accessible", headers=headers))
    assert introspect(oauth, secrets, token).get_json() == {"active": False}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["clients", "add", "a:b"], "client id"),
        (["clients", "add", "-x"], ""),
        (["clients", "add", "svc", "--audience", "elsewhere"], "not in TOKEN_AUDIENCE"),
        (["clients", "add", "svc", "--role", "root"], "root"),
    ],
)
def test_flask_clients_refuses_bad_arguments(make_app, tmp_path, arguments, message):
    runner = make_app(CLIENTS_FILE=str(tmp_path / "c.json")).test_cli_runner()
    result = runner.invoke(args=arguments)
    assert result.exit_code == 2
    assert message in result.output


def test_flask_clients_needs_clients_file(runner):
    result = runner.invoke(args=["clients", "list"])
    assert result.exit_code == 1
    assert "CLIENTS_FILE is not set" in result.output


# Hostile input never reaches a 5xx


HEADER_TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=80)
AUTHORIZATIONS = st.one_of(
    st.none(),
    HEADER_TEXT,
    HEADER_TEXT.map(lambda text: "Basic " + text),
    st.binary(max_size=60).map(lambda raw: "Basic " + base64.b64encode(raw).decode()),
)
FORM_BODIES = st.one_of(
    st.binary(max_size=200),
    st.dictionaries(
        st.sampled_from(
            [
                "grant_type",
                "client_id",
                "client_secret",
                "token",
                "token_type_hint",
                "username",
                "password",
                "refresh_token",
                "scope",
                "x",
            ]
        ),
        st.one_of(
            st.sampled_from(["client_credentials", "password", "refresh_token", "svc", ""]),
            st.text(max_size=30),
        ),
    ).map(
        lambda fields: "&".join(f"{name}={value}" for name, value in fields.items()).encode(
            "utf-8", "surrogatepass"
        )
    ),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    path=st.sampled_from([TOKEN, INTROSPECT, REVOKE]),
    authorization=AUTHORIZATIONS,
    body=FORM_BODIES,
    content_type=st.sampled_from(
        ["application/x-www-form-urlencoded", "application/json", "text/plain"]
    ),
)
def test_hostile_bodies_and_authorization_headers_never_reach_a_5xx(
    oauth, path, authorization, body, content_type
):
    headers = {"Content-Type": content_type}
    if authorization is not None:
        headers["Authorization"] = authorization
    answer = oauth.post(path, data=body, headers=headers)
    assert answer.status_code < 500, answer.data
    if answer.status_code in {400, 401} and answer.mimetype == "application/json":
        assert "error" in json.loads(answer.data) or "message" in json.loads(answer.data)


@given(header=AUTHORIZATIONS.filter(lambda value: value is not None))
@settings(max_examples=100)
def test_basic_credentials_parse_or_refuse_any_header(header):
    refusals: list[str] = []
    try:
        basic_credentials(header)
    except OAuthError as error:
        refusals.append(error.error)
    assert refusals in ([], ["invalid_client"])


# The API document


def test_the_oauth_endpoints_are_documented_and_answer_as_documented(oauth_app, oauth, secrets):
    document = document_of(oauth)
    assert documented(document) == routed(oauth_app)
    validate_spec(document)
    refresh_token = login(oauth)["refreshToken"]
    answers = [
        ("get", METADATA, oauth.get(METADATA)),
        ("post", TOKEN, oauth.post(TOKEN, data=CREDENTIALS, headers=basic("svc", secrets["svc"]))),
        (
            "post",
            TOKEN,
            oauth.post(TOKEN, data={"grant_type": "refresh_token", "refresh_token": refresh_token}),
        ),
        ("post", TOKEN, oauth.post(TOKEN, data=CREDENTIALS)),
        ("post", TOKEN, oauth.post(TOKEN, data={"grant_type": "x"})),
        ("post", INTROSPECT, introspect(oauth, secrets, client_token(oauth, secrets, "ops"))),
        ("post", INTROSPECT, introspect(oauth, secrets, refresh_token)),
        ("post", INTROSPECT, introspect(oauth, secrets, "x")),
        ("post", REVOKE, oauth.post(REVOKE, data={"token": refresh_token})),
    ]
    for method, path, answer in answers:
        assert_documented(document, method, path, answer)
    user = oauth.get("/user-accessible", headers=bearer(login(oauth)["accessToken"]))
    assert_documented(document, "get", "/user-accessible", user)


def test_a_refresh_token_recorded_for_a_client_name_before_clients_file_is_dead(
    make_app, clients_file, secrets
):
    # an open login took "client:svc" while CLIENTS_FILE was unset, on the same store
    before = login(make_app().test_client(), "client:svc")["refreshToken"]
    oauth = make_app(CLIENTS_FILE=str(clients_file)).test_client()
    spec = oauth.post("/token", json={"username": "client:svc", "refreshToken": before})
    assert spec.status_code == 401
    grant = oauth.post(TOKEN, data={"grant_type": "refresh_token", "refresh_token": before})
    assert_oauth_error(grant, 400, "invalid_grant")
    assert introspect(oauth, secrets, before).get_json() == {"active": False}
