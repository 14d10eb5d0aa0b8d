"""Bad requests get a clear JSON 4xx (docs/api.md): never HTML, a stack trace or a 5xx."""

from __future__ import annotations

import io

import pytest
from flask import Flask
from werkzeug.test import EnvironBuilder

from app.config.settings import MAX_BODY_BYTES
from tests.helpers.tokens import bearer, login


def assert_json_error(response, status: int, message: str | None = None) -> None:
    assert response.status_code == status
    assert response.mimetype == "application/json"
    body = response.get_json()
    assert set(body) == {"message"}
    assert isinstance(body["message"], str)
    assert body["message"]
    if message is not None:
        assert body["message"] == message
    assert b"<" not in response.data
    assert b"Traceback" not in response.data


@pytest.mark.parametrize(
    "path", ["/", "/nope", "/login/", "/admin/nope", "/adminx", "/api/v2/me", "/%ff"]
)
def test_unknown_path_is_404_json(client, path):
    assert_json_error(client.get(path), 404, "not found")


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("get", "/login", {"POST"}),
        ("put", "/login", {"POST"}),
        ("options", "/login", {"POST"}),
        ("get", "/token", {"POST"}),
        ("post", "/user-accessible", {"GET", "HEAD"}),
        ("delete", "/admin-accessible", {"GET", "HEAD"}),
        ("options", "/admin-accessible", {"GET", "HEAD"}),
        ("get", "/restaurant-reservation", {"POST"}),
    ],
)
def test_wrong_method_is_405_json_with_allow(client, method, path, allow):
    response = getattr(client, method)(path)
    assert_json_error(response, 405, "method not allowed")
    assert {item.strip() for item in response.headers["Allow"].split(",")} == allow


@pytest.mark.parametrize("path", ["/login", "/token"])
@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("{", "request body is not valid JSON"),
        ("", "request body is not valid JSON"),
        ("[]", "request body must be a JSON object"),
        ('"alice"', "request body must be a JSON object"),
        ("null", "request body must be a JSON object"),
        ("42", "request body must be a JSON object"),
        ('{"username": "a", "username": "b"}', "duplicate key: username"),
        ('{"a": {"x": 1, "x": 2}}', "duplicate key: x"),
        ('{"username": NaN}', "request body is not valid JSON"),
        ("[" * 5000 + "]" * 5000, "request body is nested deeper than 32 levels"),
        (b"\xff\xfe\x00", "request body is not valid JSON"),
    ],
)
def test_broken_json_is_400(client, path, data, message):
    response = client.post(path, data=data, content_type="application/json")
    assert_json_error(response, 400, message)


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "application/xml",
        "multipart/form-data; boundary=x",
        "application/octet-stream",
    ],
)
def test_other_media_types_with_a_body_are_415(client, content_type):
    response = client.post("/login", data="username=alice", content_type=content_type)
    assert_json_error(response, 415)


def test_body_without_media_type_is_415(client):
    response = client.post("/login", data=b'{"username": "alice"}', headers={"Content-Type": ""})
    assert_json_error(response, 415)


def test_json_with_charset_and_suffix_types_are_accepted(client):
    for content_type in ["application/json; charset=utf-8", "application/vnd.api+json"]:
        response = client.post("/login", data='{"username": "a"}', content_type=content_type)
        assert response.status_code == 200, content_type


@pytest.mark.parametrize("content_type", ["application/json", "application/x-www-form-urlencoded"])
def test_body_over_16_kib_is_413(client, content_type):
    response = client.post("/login", data="x" * (MAX_BODY_BYTES + 1), content_type=content_type)
    assert_json_error(response, 413, "request body is larger than 16384 bytes")


def test_body_of_16_kib_is_read(client):
    body = '{"username": "alice", "pad": "' + "x" * (MAX_BODY_BYTES - 32) + '"}'
    assert len(body) == MAX_BODY_BYTES
    assert client.post("/login", data=body, content_type="application/json").status_code == 200


def test_403_is_json_no_access(client):
    token = login(client)["accessToken"]
    response = client.get("/admin-accessible", headers=bearer(token))
    assert response.status_code == 403
    assert response.get_json() == {"message": "No access"}


def test_unexpected_error_is_500_json_without_trace(app: Flask, caplog):
    @app.get("/boom")
    def boom():
        raise RuntimeError("secret internals")

    response = app.test_client().get("/boom")
    assert_json_error(response, 500, "internal server error")
    assert b"secret internals" not in response.data
    assert "secret internals" in caplog.text  # the operator still sees it in the log


def test_service_keeps_serving_after_bad_input(client):
    for junk in ["{", "[]", "x" * 20000]:
        client.post("/login", data=junk, content_type="application/json")
    assert client.post("/login", json={"username": "a"}).status_code == 200


def test_healthz_and_readyz(client):
    assert client.get("/healthz").get_json() == {"status": "ok"}
    assert client.get("/readyz").get_json() == {"status": "ready"}


@pytest.mark.own_store
def test_readyz_is_503_when_the_store_is_unreachable(make_app, tmp_path):
    client = make_app(TOKEN_STORE_URL=f"sqlite:///{tmp_path}/dir.sqlite3").test_client()
    (tmp_path / "dir.sqlite3").mkdir()  # after start-up, which refuses a folder at once
    assert_json_error(client.get("/readyz"), 503)
    assert client.get("/healthz").status_code == 200


def chunked(client, path: str, body: bytes, content_type: str, headers=None):
    """Post ``body`` with no Content-Length, as a chunked request reaches the app."""
    return client.post(
        path,
        input_stream=io.BytesIO(body),
        content_type=content_type,
        headers=headers or {},
        environ_overrides={"wsgi.input_terminated": True},
    )


@pytest.mark.parametrize("content_type", ["application/json", "application/x-www-form-urlencoded"])
def test_chunked_body_over_16_kib_is_413_not_cut(client, content_type):
    body = b"x=" + b"a" * (MAX_BODY_BYTES - 2) + b"&username=administrator"
    response = chunked(client, "/login", body, content_type)
    assert_json_error(response, 413, "request body is larger than 16384 bytes")


def test_chunked_body_within_the_limit_is_read(client):
    response = chunked(client, "/login", b"username=alice", "application/x-www-form-urlencoded")
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"username=abc&x=\xff", "form body is not valid UTF-8"),
        (b"username=caf%E9", "form body is not valid UTF-8"),
        (b"username=%ED%A0%80", "form body is not valid UTF-8"),
        (b"&".join(b"f%d=1" % n for n in range(40)), "form body has more than 32 fields"),
    ],
)
def test_bad_form_bodies_are_400(client, body, message):
    response = client.post("/login", data=body, content_type="application/x-www-form-urlencoded")
    assert_json_error(response, 400, message)


def test_form_values_are_percent_decoded_utf8(client, signing_secret):
    import jwt

    response = client.post(
        "/login",
        data=b"username=caf%C3%A9+au+lait",
        content_type="application/x-www-form-urlencoded",
    )
    claims = jwt.decode(response.get_json()["accessToken"], signing_secret, algorithms=["HS256"])
    assert claims["username"] == "café au lait"


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br"])
def test_compressed_bodies_are_415(client, encoding):
    response = client.post("/login", json={"username": "a"}, headers={"Content-Encoding": encoding})
    assert_json_error(response, 415, "request body must not be compressed")


def test_401_content_type_is_exactly_text_plain(client):
    assert client.get("/user-accessible").headers["Content-Type"] == "text/plain"
    response = client.post("/token", json={"username": "a", "refreshToken": "b"})
    assert response.headers["Content-Type"] == "text/plain"


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/login", '{"username": "alice", "password": "x"}', "username"),
        ("/token", '{"username": "alice", "refreshToken": "a=b&c"}', "username"),
    ],
)
def test_json_sent_as_a_form_gets_a_hint(client, path, body, field):
    # what curl -d '{...}' sends without -H 'Content-Type: application/json'
    response = client.post(path, data=body, content_type="application/x-www-form-urlencoded")
    assert_json_error(
        response,
        400,
        f"{field} is required (the body looks like JSON: send it with "
        "Content-Type: application/json; curl -d sends a form)",
    )


def test_a_real_form_without_the_field_gets_no_hint(client):
    response = client.post("/login", data={"password": "{x"})
    assert_json_error(response, 400, "username is required")


def test_json_as_a_form_on_a_protected_endpoint_gets_the_hint(client):
    token = login(client)["accessToken"]
    response = client.post(
        "/restaurant-reservation",
        data='{"guestsCount": 4}',
        content_type="application/x-www-form-urlencoded",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 400
    assert response.get_json()["message"].startswith("guestsCount is required (the body looks")


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ('{"username" : "a",\n "username"\t:"b"}', 400, "duplicate key: username"),
        ('{"username": "a\\": ", "username": "b"}', 400, "duplicate key: username"),
        ('{"username": "alice", "x": [{"k": 1, "k": 2}]}', 400, "duplicate key: k"),
        ('{"username": "alice", "note": "say \\"hi\\": twice"}', 200, None),
        ('{"username": "alice", "x": {"username": 1}}', 200, None),
        ('\ufeff{"username": "alice"}', 200, None),
        ('{"username": "alice", "n": 1e400}', 200, None),
    ],
)
def test_json_bodies_parse_alike_on_the_fast_and_the_careful_path(client, body, status, message):
    response = client.post("/login", data=body.encode(), content_type="application/json")
    assert response.status_code == status, response.data
    if message is not None:
        assert response.get_json() == {"message": message}


def raw_query_status(app: Flask, path: str, query: str, headers: dict[str, str]) -> tuple:
    """Send ``query`` as the WSGI server gives a raw byte (latin-1), which no client
    library lets through unescaped; return the status and the body."""
    environ = EnvironBuilder(path, headers=headers).get_environ()
    environ.update(QUERY_STRING=query, REMOTE_ADDR="127.0.0.1")
    statuses: list[str] = []
    body = b"".join(app.wsgi_app(environ, lambda status, _, __=None: statuses.append(status)))
    return int(statuses[0][:3]), body


@pytest.mark.parametrize("metrics", ["on", "off"])  # the metrics' request class and Flask's
@pytest.mark.parametrize("query", ["\xff", "after=\xe9", "role=\xc3", "rd=%ff\xfe"])
@pytest.mark.parametrize(
    "path", ["/auth/check", "/sessions", "/admin/users/alice/sessions", "/auth/corp/login"]
)
def test_a_query_that_is_not_utf_8_is_400_on_every_endpoint_that_reads_one(
    make_app, path, query, metrics
):
    app = make_app(
        METRICS=metrics,
        OIDC_PROVIDERS="corp",
        OIDC_CORP_ISSUER="https://id.example.com/",
        OIDC_CORP_CLIENT_ID="token-service",
        OIDC_CORP_CLIENT_SECRET="client-secret-value",
    )
    token = login(app.test_client(), "admin")["accessToken"]
    status, body = raw_query_status(app, path, query, bearer(token))
    assert (status, body) == (
        400,
        b'{"message":"the query is not UTF-8 (percent-encode other bytes)"}\n',
    )
