"""GET /openapi.json: a valid OpenAPI 3.1 document of every route, true to the real answers."""

from __future__ import annotations

import importlib.metadata
import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jwt
import pytest
import requests
from flask import Flask
from flask.testing import FlaskClient
from openapi_spec_validator import validate as validate_spec

import app.openapi.document
from app.auth.tokens import REFRESH_TOKEN_LENGTH, ROLES, issue_cookie_token
from app.config.parsers import PROVIDER_NAME
from app.config.settings import ALGORITHMS, MAX_BODY_BYTES
from app.config.usernames import MAX_USERNAME_LENGTH, USERNAME_PATTERN
from app.extensions import KEY_RING
from app.http.request_body import DECIMAL, MAX_FORM_FIELDS
from app.openapi.document import OPTION_OFF, UNKNOWN_VERSION, merge_patch, service_version
from tests.helpers.hostile_provider import CLIENT_ID, CLIENT_SECRET, HostileProvider
from tests.helpers.openapi import (
    assert_documented,
    document_of,
    documented,
    routed,
    validator,
    variables_blanked,
)
from tests.helpers.tokens import bearer, login
from tests.helpers.tools import ROOT

#: The endpoints SPEC.md and the README name, by path and method: all must be documented.
CONTRACT = {
    ("/login", "post"),
    ("/token", "post"),
    ("/token/{refreshToken}", "delete"),
    ("/restaurant-reservation", "post"),
    ("/user-accessible", "get"),
    ("/admin-accessible", "get"),
    ("/auth/check", "get"),
    ("/api/v1/me", "get"),
    ("/auth/{provider}/login", "get"),
    ("/auth/{provider}/callback", "get"),
    ("/auth/logout", "post"),
    ("/healthz", "get"),
    ("/readyz", "get"),
    ("/openapi.json", "get"),
}
#: The sessions API's operations: every one takes a Bearer token.
SESSION_OPERATIONS = [
    ("/sessions", "get"),
    ("/sessions", "head"),
    ("/sessions", "delete"),
    ("/sessions/{id}", "delete"),
    ("/admin/users/{username}/sessions", "get"),
    ("/admin/users/{username}/sessions", "head"),
    ("/admin/users/{username}/sessions", "delete"),
    ("/admin/users/{username}/sessions/{id}", "delete"),
]
FORM = "application/x-www-form-urlencoded"
DOCUMENT_FILE = ROOT / "app" / "openapi" / "openapi.json"


@pytest.fixture
def document(client: FlaskClient) -> dict[str, Any]:
    return document_of(client)


def test_document_is_valid_openapi_3_1(document):
    assert document["openapi"].startswith("3.1.")
    validate_spec(document)


def test_document_version_is_the_service_version(document):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert document["info"]["version"] == project["version"]


def test_the_version_outside_a_checkout_is_the_installed_package_s(tmp_path, monkeypatch):
    versions = {"token-service": "2.3.4"}
    monkeypatch.setattr(importlib.metadata, "version", versions.__getitem__)
    assert service_version(tmp_path / "pyproject.toml") == "2.3.4"
    other = tmp_path / "other.toml"  # another project's file is no checkout of the service
    other.write_text('[project]\nname = "other"\nversion = "9.9.9"\n')
    assert service_version(other) == "2.3.4"


def test_the_version_without_a_checkout_or_metadata_is_unknown(tmp_path, monkeypatch):
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert service_version(tmp_path / "pyproject.toml") == UNKNOWN_VERSION == "0+unknown"


# --- the file -----------------------------------------------------------------------


def file_document() -> dict[str, Any]:
    """Return the API document's file, refusing a member named twice (parsers keep the last)."""

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        names = [name for name, _ in pairs]
        assert len(set(names)) == len(names), f"named twice: {names}"
        return dict(pairs)

    return json.loads(DOCUMENT_FILE.read_text(encoding="utf-8"), object_pairs_hook=unique)


def extensions(node: Any) -> Iterator[str]:
    """Yield the name of every ``x-`` member in ``node``, at any depth."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key.startswith("x-"):
                yield key
            yield from extensions(value)
    elif isinstance(node, list):
        for value in node:
            yield from extensions(value)


def test_the_file_is_a_valid_document_on_its_own():
    validate_spec(file_document())


def test_every_extension_of_the_file_is_an_option_the_loader_knows():
    assert set(extensions(file_document())) == set(OPTION_OFF)


def test_the_file_s_limits_and_patterns_are_the_code_s():
    document = file_document()
    schemas = document["components"]["schemas"]
    username = {"$ref": "#/components/schemas/Username"}
    for name in ["LoginRequest", "LoginForm", "Claims"]:
        assert schemas[name]["properties"]["username"] == username, name
    for name in ["RefreshRequest", "RefreshForm"]:  # any string: 401 if login refuses it
        assert set(schemas[name]["properties"]["username"]) == {"type", "description"}, name
    assert schemas["Username"]["pattern"] == USERNAME_PATTERN
    assert schemas["Username"]["maxLength"] == MAX_USERNAME_LENGTH
    open_login = document["paths"]["/login"]["post"]["x-without-user-directory"]
    assert f"1 to {MAX_USERNAME_LENGTH} characters" in open_login["description"]
    refresh_token = schemas["Tokens"]["properties"]["refreshToken"]
    assert refresh_token["pattern"] == f"^[A-Za-z0-9]{{{REFRESH_TOKEN_LENGTH}}}$"
    assert schemas["Claims"]["properties"]["role"]["enum"] == list(ROLES)
    guests = schemas["ReservationForm"]["properties"]["guestsCount"]
    assert guests["pattern"] == f"^{DECIMAL.pattern}$"
    for name in ["LoginForm", "RefreshForm", "ReservationForm"]:
        assert schemas[name]["maxProperties"] == MAX_FORM_FIELDS
    for path in app.openapi.document.PROVIDER_PATHS:
        parameter = document["paths"][path]["get"]["parameters"][0]
        assert parameter["name"] == "provider"
        assert parameter["schema"]["pattern"] == f"^{PROVIDER_NAME.pattern}$"
    for path in ["/login", "/token", "/restaurant-reservation"]:
        body = document["paths"][path]["post"]["requestBody"]
        assert f"at most {MAX_BODY_BYTES} bytes" in body["description"]
    too_large = document["components"]["responses"]["PayloadTooLarge"]
    assert f"larger than {MAX_BODY_BYTES} bytes" in too_large["description"]
    example = too_large["content"]["application/json"]["example"]["message"]
    assert example == f"request body is larger than {MAX_BODY_BYTES} bytes"


@pytest.mark.parametrize(
    ("target", "patch", "result"),
    [  # RFC 7386, appendix A
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_the_option_patches_are_json_merge_patches(target, patch, result):
    assert merge_patch(target, patch) == result


def users_file(folder: Path) -> str:
    path = folder / "users.json"
    path.write_text("{}")
    return str(path)


@pytest.mark.store("sqlite")  # the document does not depend on the store
@pytest.mark.parametrize(
    ("rate_limit", "directory", "failure_limit", "login_429", "token_429"),
    [
        ("3 per minute", False, "3 per hour", True, True),
        ("3 per minute", True, "off", True, True),
        ("off", False, "3 per hour", False, False),  # no directory: no failed login to count
        ("off", True, "3 per hour", True, False),
        ("off", True, "off", False, False),
    ],
)
def test_each_option_changes_the_document_and_it_stays_valid(
    make_app, tmp_path, rate_limit, directory, failure_limit, login_429, token_429
):
    options = {"RATE_LIMIT_AUTH": rate_limit, "LOGIN_FAILURE_LIMIT": failure_limit}
    if directory:
        options["USERS_FILE"] = users_file(tmp_path)
    document = document_of(make_app(**options).test_client())
    validate_spec(document)
    assert list(extensions(document)) == []
    login_operation = document["paths"]["/login"]["post"]
    assert ("429" in login_operation["responses"]) is login_429
    assert ("429" in document["paths"]["/token"]["post"]["responses"]) is token_429
    assert ("401" in login_operation["responses"]) is directory
    assert ("user directory" in login_operation["description"]) is directory
    password = document["components"]["schemas"]["LoginForm"]["properties"]["password"]
    assert password["description"] == (
        "Checked against the user directory." if directory else "Not checked."
    )


@pytest.mark.store("sqlite")  # the document does not depend on the store
def test_the_provider_parameter_names_the_configured_providers(make_app):
    providers = {"OIDC_PROVIDERS": "corp,other"}
    for name in ["corp", "other"]:
        providers |= {
            f"OIDC_{name.upper()}_ISSUER": f"http://127.0.0.1:9/{name}",  # never asked here
            f"OIDC_{name.upper()}_CLIENT_ID": "client",
            f"OIDC_{name.upper()}_CLIENT_SECRET": "s" * 32,
        }
    configured = document_of(make_app(**providers).test_client())
    unconfigured = document_of(make_app().test_client())
    for path in app.openapi.document.PROVIDER_PATHS:
        for method in ["get", "head"]:
            (parameter, *_) = configured["paths"][path][method]["parameters"]
            assert parameter["description"].endswith(" Configured: corp, other.")
            assert parameter["example"] == "corp"
            (parameter, *_) = unconfigured["paths"][path][method]["parameters"]
            assert "Configured" not in parameter["description"]


@pytest.mark.store("sqlite")  # the document does not depend on the store
def test_the_cleared_cookie_is_the_configured_one(make_app):
    document = document_of(make_app(AUTH_COOKIE_NAME="session.token").test_client())
    pattern = document["components"]["headers"]["ClearAuthCookie"]["schema"]["pattern"]
    assert re.search(pattern, "session.token=; Max-Age=0; Path=/")
    assert not re.search(pattern, "sessionXtoken=; Max-Age=0; Path=/")


@pytest.mark.store("sqlite")  # the document does not depend on the store
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_text_is_true_for_every_signing_algorithm(make_app, algorithm):
    document = document_of(make_app(SIGNING_ALGORITHM=algorithm).test_client())
    jwks = document["paths"].pop("/.well-known/jwks.json")
    assert "HS256" not in json.dumps(jwks)  # which speaks of key pairs only
    for name in ALGORITHMS:  # nowhere else does the document name an algorithm
        assert name not in json.dumps(document), name
    assert "SIGNING_ALGORITHM" in document["info"]["description"]
    token_text = document["components"]["schemas"]["AccessTokenText"]["description"]
    assert "SIGNING_ALGORITHM" in token_text
    assert "`kid`" in token_text
    tokens = document["paths"]["/login"]["post"]["responses"]["200"]["content"]
    example = tokens["application/json"]["example"]["accessToken"]
    assert "kid" in jwt.get_unverified_header(example)  # as every token the service signs


def test_document_is_json_and_built_once_per_app(make_app, monkeypatch):
    builds = []  # the cookie name of each app the document was built for
    build = app.openapi.document.openapi_document

    def counted(service: Flask) -> dict[str, Any]:
        builds.append(service.config["SETTINGS"].auth_cookie_name)
        return build(service)

    monkeypatch.setattr(app.openapi.document, "openapi_document", counted)
    first_app, second_app = make_app(), make_app(AUTH_COOKIE_NAME="other")
    first = first_app.test_client().get("/openapi.json")
    again = first_app.test_client().get("/openapi.json")
    other = second_app.test_client().get("/openapi.json")
    assert first.content_type == "application/json"
    assert first.data == again.data
    assert builds == ["jwt", "other"]
    assert other.get_json()["components"]["securitySchemes"]["cookieAuth"]["name"] == "other"


def test_every_route_is_documented_with_its_methods_and_nothing_else(app, document):
    assert documented(document) == routed(app)
    contract = {(variables_blanked(path), method) for path, method in CONTRACT}
    assert contract <= documented(document)
    for path, method in CONTRACT:  # OpenAPI names, as clients read them
        assert method in document["paths"][path]


def test_each_get_comes_with_its_head(document):
    for item in document["paths"].values():
        assert ("get" in item) == ("head" in item)


@pytest.mark.parametrize("with_route", [False, True])
def test_metrics_is_documented_exactly_when_the_app_serves_it(make_app, with_route):
    service = make_app()
    if with_route and "/metrics" not in {rule.rule for rule in service.url_map.iter_rules()}:
        service.add_url_rule("/metrics", "metrics", lambda: "", methods=["GET"])
    document = document_of(service.test_client())
    served = "/metrics" in {rule.rule for rule in service.url_map.iter_rules()}
    assert ("/metrics" in document["paths"]) == served
    assert documented(document) == routed(service)


def test_security_schemes_are_bearer_jwt_and_the_auth_cookie(make_app):
    document = document_of(make_app(AUTH_COOKIE_NAME="session_token").test_client())
    schemes = document["components"]["securitySchemes"]
    assert schemes["bearerAuth"] == {
        **schemes["bearerAuth"],
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
    }
    assert schemes["cookieAuth"] == {
        **schemes["cookieAuth"],
        "type": "apiKey",
        "in": "cookie",
        "name": "session_token",
    }
    secured = {
        (path, method): operation["security"]
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if "security" in operation
    }
    assert secured == {
        ("/restaurant-reservation", "post"): [{"bearerAuth": []}],
        ("/user-accessible", "get"): [{"bearerAuth": []}],
        ("/user-accessible", "head"): [{"bearerAuth": []}],
        ("/admin-accessible", "get"): [{"bearerAuth": []}],
        ("/admin-accessible", "head"): [{"bearerAuth": []}],
        ("/auth/check", "get"): [{"bearerAuth": []}],  # and cookieAuth with AUTH_CHECK_COOKIE
        ("/auth/check", "head"): [{"bearerAuth": []}],
        **{
            (path, method): [{"bearerAuth": []}]
            for path in ("/auth/ext-authz/", "/auth/ext-authz/{path}")
            for method in ("get", "head", "post", "put", "delete", "patch", "trace")
        },
        ("/api/v1/me", "get"): [{"cookieAuth": []}],
        ("/api/v1/me", "head"): [{"cookieAuth": []}],
        **{operation: [{"bearerAuth": []}] for operation in SESSION_OPERATIONS},
    }
    assert "security" not in document  # every other operation is open


def test_body_endpoints_take_json_and_forms(document):
    for path in ["/login", "/token", "/restaurant-reservation"]:
        body = document["paths"][path]["post"]["requestBody"]
        assert body["required"] is True
        assert set(body["content"]) == {"application/json", "application/x-www-form-urlencoded"}


def examples(node: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any], Any]]:
    """Yield (location, schema, example) for every example that sits beside a schema."""
    if isinstance(node, dict):
        if "schema" in node and "example" in node:
            yield where, node["schema"], node["example"]
        for key, value in node.items():
            yield from examples(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from examples(value, f"{where}/{index}")


def test_every_example_matches_its_schema(document):
    found = list(examples(document))
    assert len(found) >= 20
    for where, schema, example in found:
        errors = list(validator(document, schema).iter_errors(example))
        assert not errors, f"{where}: {errors[0].message}"


# --- real answers -------------------------------------------------------------------


def test_tokens_answers_match_the_document(client, document, app):
    response = client.post("/login", json={"username": "alice", "password": "pw"})
    assert_documented(document, "post", "/login", response)
    tokens = response.get_json()
    response = client.post("/login", data={"username": app.config["SETTINGS"].admin_username})
    assert_documented(document, "post", "/login", response)
    fields = {"username": "alice", "refreshToken": tokens["refreshToken"]}
    assert_documented(document, "post", "/token", client.post("/token", data=fields))
    fields["username"] = "bob"
    declared = assert_documented(document, "post", "/token", client.post("/token", json=fields))
    assert "headers" not in declared  # /token's 401 names no Bearer challenge
    path = "/token/{refreshToken}"
    assert_documented(document, "delete", path, client.delete(f"/token/{tokens['refreshToken']}"))
    assert_documented(document, "delete", path, client.delete("/token/unknown"))


@pytest.mark.parametrize(
    ("request_options", "status"),
    [
        ({"json": {}}, 400),
        ({"json": {"username": 5}}, 400),
        ({"data": "{", "content_type": "application/json"}, 400),
        (
            {"data": "username=a&username=b", "content_type": "application/x-www-form-urlencoded"},
            400,
        ),
        ({"data": "username=a", "content_type": "text/plain"}, 415),
        ({"data": "x" * (MAX_BODY_BYTES + 1), "content_type": "application/json"}, 413),
    ],
)
def test_login_errors_match_the_document(client, document, request_options, status):
    response = client.post("/login", **request_options)
    assert response.status_code == status
    assert_documented(document, "post", "/login", response)


def test_store_unavailable_matches_the_document(make_app, tmp_path):
    client = make_app(TOKEN_STORE_URL=f"sqlite:///{tmp_path}/dir.sqlite3").test_client()
    (tmp_path / "dir.sqlite3").mkdir()  # after start-up, which refuses a folder at once
    document = document_of(client)
    for method, path, request_path in [
        ("post", "/login", "/login"),
        ("delete", "/token/{refreshToken}", "/token/abc"),
        ("get", "/readyz", "/readyz"),
    ]:
        response = client.open(request_path, method=method, json={"username": "a"})
        assert response.status_code == 503
        declared = assert_documented(document, method, path, response)
        assert "Retry-After" in declared["headers"]


def test_protected_answers_match_the_document(client, document, app):
    user = bearer(login(client, "alice")["accessToken"])
    admin = bearer(login(client, app.config["SETTINGS"].admin_username)["accessToken"])
    calls = [
        ("post", "/restaurant-reservation", user, {"json": {"guestsCount": 4}}, 200),
        ("post", "/restaurant-reservation", user, {"data": {"guestsCount": "-2.5"}}, 200),
        ("post", "/restaurant-reservation", user, {"json": {"guestsCount": True}}, 400),
        ("post", "/restaurant-reservation", {}, {"json": {"guestsCount": 4}}, 401),
        ("get", "/user-accessible", user, {}, 200),
        ("head", "/user-accessible", admin, {}, 200),
        ("get", "/user-accessible", bearer("not.a.token"), {}, 401),
        ("head", "/user-accessible", {}, {}, 401),
        ("get", "/admin-accessible", admin, {}, 200),
        ("get", "/admin-accessible", user, {}, 403),
        ("get", "/admin-accessible", {}, {}, 401),
    ]
    for method, path, headers, options, status in calls:
        response = client.open(path, method=method, headers=headers, **options)
        assert response.status_code == status, (method, path, response.data)
        declared = assert_documented(document, method, path, response)
        if status == 401:
            assert declared["headers"]["WWW-Authenticate"]


def test_ops_answers_match_the_document(client, document):
    for method, path in [
        ("get", "/healthz"),
        ("head", "/healthz"),
        ("get", "/readyz"),
        ("get", "/openapi.json"),
        ("head", "/openapi.json"),
    ]:
        response = client.open(path, method=method)
        assert response.status_code == 200
        assert_documented(document, method, path, response)


def test_method_not_allowed_matches_the_document(client, document):
    for method, path in [("get", "/login"), ("options", "/healthz"), ("post", "/openapi.json")]:
        response = client.open(path, method=method)
        assert response.status_code == 405
        assert method not in document["paths"][path]
        declared = document["components"]["responses"]["MethodNotAllowed"]
        validator(document, declared["content"]["application/json"]["schema"]).validate(
            response.get_json()
        )
        assert response.headers["Allow"]


@pytest.fixture
def provider() -> Iterator[HostileProvider]:
    provider = HostileProvider()
    yield provider
    provider.stop()


def test_third_party_login_answers_match_the_document(make_app, provider):
    browser = make_app(
        OIDC_PROVIDERS="corp",
        OIDC_CORP_ISSUER=provider.issuer,
        OIDC_CORP_CLIENT_ID=CLIENT_ID,
        OIDC_CORP_CLIENT_SECRET=CLIENT_SECRET,
        AUTH_COOKIE_SECURE="false",
    ).test_client()
    document = document_of(browser)
    assert (
        "corp" in document["paths"]["/auth/{provider}/login"]["get"]["parameters"][0]["description"]
    )
    login_path, callback_path = "/auth/{provider}/login", "/auth/{provider}/callback"
    assert_documented(document, "get", "/api/v1/me", browser.get("/api/v1/me"))
    assert_documented(document, "get", login_path, browser.get("/auth/nobody/login"))
    assert_documented(document, "get", callback_path, browser.get("/auth/corp/callback?state=x"))
    started = browser.get("/auth/corp/login")
    assert_documented(document, "get", login_path, started)
    answer = requests.get(started.headers["Location"], allow_redirects=False, timeout=5)
    callback = urlsplit(answer.headers["Location"])
    finished = browser.get(f"{callback.path}?{callback.query}")
    assert finished.status_code == 302
    assert_documented(document, "get", callback_path, finished)
    assert_documented(document, "get", "/api/v1/me", browser.get("/api/v1/me"))
    assert_documented(document, "post", "/auth/logout", browser.post("/auth/logout"))
    provider.discovery_changes = {"jwks_uri": None}
    browser.application.extensions["third_party_login"].clients["corp"].server_metadata.clear()
    assert_documented(document, "get", login_path, browser.get("/auth/corp/login"))


def test_cookie_user_answer_matches_the_document(client, document, app):
    settings = app.config["SETTINGS"]
    user = {"source": "corp", "id": "248289761001", "shownName": "Alice Smith"}
    token = issue_cookie_token(user, app.extensions[KEY_RING], 60)
    client.set_cookie(settings.auth_cookie_name, token)
    response = client.get("/api/v1/me")
    assert response.get_json() == user
    assert_documented(document, "get", "/api/v1/me", response)


@pytest.mark.parametrize("algorithm", ["HS256", "EdDSA", "ES256"])
def test_jwks_answers_match_the_document(make_app, document, algorithm):
    client = make_app(SIGNING_ALGORITHM=algorithm).test_client()
    response = client.get("/.well-known/jwks.json")
    assert response.status_code == (404 if algorithm == "HS256" else 200)
    assert_documented(document, "get", "/.well-known/jwks.json", response)
    if response.status_code == 200:
        again = client.get(
            "/.well-known/jwks.json", headers={"If-None-Match": response.headers["ETag"]}
        )
        assert again.status_code == 304
        assert_documented(document, "get", "/.well-known/jwks.json", again)
