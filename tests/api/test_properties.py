"""Property tests (Hypothesis): whatever a client sends, no 5xx, and no token for anyone else.

Every request goes through the Flask test client; every access token an answer
carries is decoded and its username and role checked against what the request
sent. The runs are bounded and derandomized, so CI sees the same cases every time.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from app.auth.tokens import role_for
from app.auth.users import HASHER
from tests.helpers.tokens import bearer, login

pytestmark = pytest.mark.store("sqlite")  # the properties do not depend on the store

BOUNDED = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
ADMIN = "admin"
PATHS = [
    "/login", "/token", "/token/x", "/restaurant-reservation", "/user-accessible",
    "/admin-accessible", "/api/v1/me", "/auth/corp/login", "/auth/corp/callback",
    "/auth/logout", "/healthz", "/readyz", "/openapi.json", "/.well-known/jwks.json",
]  # fmt: skip
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
#: The operations the service serves: half the requests aim at one of them.
OPERATIONS = [
    ("POST", "/login"), ("POST", "/token"), ("DELETE", "/token/x"),
    ("POST", "/restaurant-reservation"), ("GET", "/user-accessible"),
    ("GET", "/admin-accessible"), ("GET", "/api/v1/me"), ("POST", "/auth/logout"),
    ("GET", "/healthz"), ("GET", "/openapi.json"), ("GET", "/auth/corp/login"),
]  # fmt: skip
MEDIA_TYPES = [
    "application/json", "application/x-www-form-urlencoded", "text/plain",
    "application/json; charset=latin-1", "application/vnd.api+json", "multipart/form-data",
    "application/x-www-form-urlencoded; charset=utf-16", "",
]  # fmt: skip
#: Client addresses: loopback (exempt), and others the default limits count.
ADDRESSES = ["127.0.0.1", "::1", "203.0.113.7", "2001:db8::1", "::ffff:198.51.100.1", "unknown"]

names = st.one_of(
    st.sampled_from(["alice", "Alice", "alice ", ADMIN, "Admin", " admin", "bob", "é", "a:b"]),
    st.text(min_size=1, max_size=40),
    st.text(min_size=250, max_size=260),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=10,
)
header_values = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=255, blacklist_characters="\x7f"),
    max_size=60,
)
paths = st.one_of(
    st.sampled_from(PATHS),
    st.builds(lambda tail: "/token/" + tail, st.text(max_size=50)),
    st.builds(lambda tail: "/" + tail, st.text(max_size=50)),
).map(lambda path: "".join(c for c in path if c.isprintable() or c == "\n") or "/")


@st.composite
def bodies(draw: st.DrawFn) -> tuple[str, bytes, dict[str, Any] | None]:
    """Return (media type, raw body, the fields as sent when they form an object)."""
    fields = draw(
        st.fixed_dictionaries(
            {"username": names},
            optional={
                "password": st.text(max_size=20),
                "refreshToken": st.text(max_size=50),
                "guestsCount": json_values,
            },
        )
        | st.dictionaries(
            st.sampled_from(["username", "password", "refreshToken", "guestsCount", "extra"]),
            st.one_of(names, json_values),
            max_size=5,
        )
    )
    kind = draw(st.sampled_from(["json", "form", "raw", "json-any", "none"]))
    if kind == "json":
        return "application/json", json.dumps(fields).encode(), fields
    if kind == "form":
        texts = {key: str(value) for key, value in fields.items()}
        return "application/x-www-form-urlencoded", urlencode(texts).encode(), texts
    if kind == "json-any":
        return "application/json", json.dumps(draw(json_values)).encode(), None
    if kind == "raw":
        return draw(st.sampled_from(MEDIA_TYPES)), draw(st.binary(max_size=200)), None
    return "", b"", None


def sent_username(media_type: str, data: bytes) -> str | None:
    """Return the username a body carries, read as the service reads it, or None."""
    try:
        if "json" in media_type:
            fields = json.loads(data)
        elif media_type.startswith("application/x-www-form-urlencoded"):
            fields = dict(parse_qsl(data.decode(), keep_blank_values=True))
        else:
            return None
    except ValueError:
        return None
    username = fields.get("username") if isinstance(fields, dict) else None
    return username if isinstance(username, str) else None


def check_tokens_of(response, username: str | None, signing_key) -> None:
    """Decode every access token of an answer: it is for the sender, with the sender's role."""
    body = response.get_json(silent=True) if response.is_json else None
    event(f"status {response.status_code}")  # --hypothesis-show-statistics: what ran
    if not isinstance(body, dict) or "accessToken" not in body:
        return
    event("an access token checked")
    assert username is not None, body
    claims = signing_key.decode(body["accessToken"])
    assert claims["username"] == username
    assert claims["role"] == role_for(username, ADMIN)


@pytest.fixture
def service(make_app, signing_key):
    app = make_app(ADMIN_USERNAME=ADMIN)
    client = app.test_client()
    tokens = login(client, "alice")
    return client, tokens


@BOUNDED
@given(
    operation=st.sampled_from(OPERATIONS) | st.tuples(st.sampled_from(METHODS), paths),
    body=bodies(),
    headers=st.dictionaries(
        st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,20}", fullmatch=True), header_values, max_size=4
    ),
    authorization=st.one_of(st.none(), header_values, st.just("valid")),
    content_type=st.none() | st.sampled_from(MEDIA_TYPES) | header_values,
    address=st.sampled_from(ADDRESSES),
)
def test_any_request_to_any_endpoint_answers_below_500_and_no_token_for_another_user(
    service, signing_key, operation, body, headers, authorization, content_type, address
):
    client, tokens = service
    method, path = operation
    media_type, data, _ = body
    headers = {key: value for key, value in headers.items() if key.lower() != "content-length"}
    if authorization == "valid":
        headers.update(bearer(tokens["accessToken"]))
    elif authorization is not None:
        headers["Authorization"] = authorization
    media_type = content_type if content_type is not None else media_type
    if media_type:
        headers["Content-Type"] = media_type
    response = client.open(
        path,
        method=method,
        data=data,
        headers=headers,
        environ_base={"REMOTE_ADDR": address},
    )
    assert response.status_code < 500, (response.status_code, response.data[:200])
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    check_tokens_of(response, sent_username(media_type, data), signing_key)


@pytest.fixture
def issued(make_app, signing_key):
    """Return a client, and who each of a few refresh tokens was issued to (one revoked)."""
    client = make_app(ADMIN_USERNAME=ADMIN).test_client()
    owners = {}
    for username in ["alice", "Alice", ADMIN, "alice ", "é"]:
        owners[login(client, username)["refreshToken"]] = username
    revoked = login(client, "bob")["refreshToken"]
    assert client.delete(f"/token/{revoked}").status_code == 204
    return client, owners, revoked


@BOUNDED
@given(
    username=names,
    token=st.integers(min_value=0, max_value=7),
    owners_name=st.booleans(),
    guessed=st.text(max_size=60),
    encoding=st.sampled_from(["json", "form"]),
    extra=st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=3),
)
def test_a_refresh_token_refreshes_for_exactly_its_user_and_role(
    issued, signing_key, username, token, owners_name, guessed, encoding, extra
):
    client, owners, revoked = issued
    tokens = [*owners, revoked, guessed]
    refresh_token = tokens[min(token, len(tokens) - 1)]
    if owners_name:  # half the cases send the name the token was issued to, if any
        username = owners.get(refresh_token, username)
    fields = {**extra, "username": username, "refreshToken": refresh_token}
    if encoding == "json":
        response = client.post("/token", json=fields)
    else:
        response = client.post("/token", data=fields)
    # any string is a username here: one that login refuses has no token recorded, so 401
    assert response.status_code == (200 if owners.get(refresh_token) == username else 401)
    check_tokens_of(response, username, signing_key)


@BOUNDED
@given(username=names, password=st.one_of(st.none(), st.text(max_size=30), json_values))
def test_login_issues_tokens_for_the_username_sent_and_its_role_only(
    service, signing_key, username, password
):
    client, _ = service
    fields: dict[str, Any] = {"username": username}
    if password is not None:
        fields["password"] = password
    response = client.post("/login", json=fields)
    assert response.status_code < 500
    check_tokens_of(response, username, signing_key)
    if response.status_code == 200:  # its refresh token serves that username, nobody else
        refresh_token = response.get_json()["refreshToken"]
        other = username + "x"
        for name, status in [(username, 200), (other, 401)]:
            answer = client.post("/token", json={"username": name, "refreshToken": refresh_token})
            assert answer.status_code == status  # `other` may be one too long: 401 too
            check_tokens_of(answer, name, signing_key)


PASSWORDS = {"alice": "alice password", "bob": "bob password", ADMIN: "admin password"}


@pytest.fixture
def directory_client(make_app, tmp_path):
    """Return a client of an app whose USERS_FILE holds PASSWORDS (shared by the examples)."""
    path = tmp_path / "users.json"
    path.write_text(json.dumps({name: HASHER.hash(pw) for name, pw in PASSWORDS.items()}))
    # 60 examples on one app: the per-username limit (tested in test_login_failures.py) off
    return make_app(
        ADMIN_USERNAME=ADMIN, USERS_FILE=str(path), LOGIN_FAILURE_LIMIT="off"
    ).test_client()


@settings(BOUNDED, max_examples=60)  # each example verifies an Argon2id hash: ~20 ms
@given(
    credentials=st.sampled_from(sorted(PASSWORDS.items()))
    | st.tuples(
        st.sampled_from(["alice", "Alice", "bob", "mallory", ADMIN]),
        st.sampled_from([*PASSWORDS.values(), "", "x"]) | st.text(max_size=20),
    )
)
def test_with_a_directory_only_the_right_password_gets_a_token(
    directory_client, signing_key, credentials
):
    username, password = credentials
    response = directory_client.post("/login", json={"username": username, "password": password})
    assert response.status_code == (200 if PASSWORDS.get(username) == password else 401)
    check_tokens_of(response, username, signing_key)


def username_allowed(username: str) -> bool:
    """Return whether a username may log in, by the rule as README states it."""
    bidi_controls = {chr(code) for code in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]}
    return (
        1 <= len(username) <= 256
        and not username.replace("\ufeff", " ").isspace()  # ECMA-262's whitespace has it
        and username not in {".", ".."}
        and not any(
            unicodedata.category(char) == "Cc" or char in "\u2028\u2029" or char in bidi_controls
            for char in username
        )
    )


@pytest.fixture
def unlimited_client(make_app):
    """Return a client of an app without rate limits (shared by the examples)."""
    return make_app(RATE_LIMIT_AUTH="off").test_client()


@BOUNDED
@given(
    username=st.text(max_size=260)
    | st.text(alphabet=st.sampled_from(" \t\r\n\x00\x1f\x7f\x85\x9f\xa0\u2003\u2028\u202ea😀"))
    | st.text(alphabet=".", min_size=1, max_size=3)
    | st.text(alphabet="\ufeff\u3000 a", min_size=1, max_size=3)
)
def test_login_is_200_exactly_when_the_username_rule_allows_the_name(
    unlimited_client, signing_key, username
):
    response = unlimited_client.post("/login", json={"username": username, "password": "pw"})
    assert response.status_code in {200, 400}, response.data
    assert (response.status_code == 200) == username_allowed(username), response.data
    check_tokens_of(response, username, signing_key)
