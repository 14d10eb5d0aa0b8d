"""POST /token: a new access token for a refresh token recorded for exactly that username."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.config.usernames import UNSAFE_USERNAME_CHARACTERS
from tests.helpers.tokens import login

pytestmark = pytest.mark.signing_algorithms("HS256", "EdDSA")


def assert_unauthorized(response) -> None:
    assert response.status_code == 401
    assert response.mimetype == "text/plain"
    assert response.data == b"Unauthorized"


@pytest.mark.parametrize("body_kind", ["json", "form"])
def test_refresh_returns_a_new_access_token(client, signing_key, body_kind):
    tokens = login(client, "alice")
    fields = {"username": "alice", "refreshToken": tokens["refreshToken"]}
    body = {"json": fields} if body_kind == "json" else {"data": fields}
    response = client.post("/token", **body)
    assert response.status_code == 200
    assert set(response.get_json()) == {"accessToken"}
    claims = signing_key.decode(response.get_json()["accessToken"])
    assert claims["username"] == "alice"
    assert claims["role"] == "user"
    assert claims["exp"] == claims["iat"] + 60


def test_refresh_token_stays_active_after_use(client):
    tokens = login(client, "alice")
    for _ in range(3):
        fields = {"username": "alice", "refreshToken": tokens["refreshToken"]}
        assert client.post("/token", json=fields).status_code == 200


def test_refresh_recomputes_the_role_from_the_username(make_app, signing_key):
    tokens = login(make_app().test_client(), "carol")
    promoted = make_app(ADMIN_USERNAME="carol").test_client()  # same store, new admin
    fields = {"username": "carol", "refreshToken": tokens["refreshToken"]}
    response = promoted.post("/token", json=fields)
    claims = signing_key.decode(response.get_json()["accessToken"])
    assert claims["role"] == "admin"


def test_unknown_refresh_token_is_401_plain_text(client):
    response = client.post("/token", json={"username": "alice", "refreshToken": "x" * 42})
    assert_unauthorized(response)
    assert "WWW-Authenticate" not in response.headers


def test_empty_refresh_token_is_an_unknown_one(client):
    login(client, "alice")
    assert_unauthorized(client.post("/token", json={"username": "alice", "refreshToken": ""}))
    assert_unauthorized(client.post("/token", data={"username": "alice", "refreshToken": ""}))


def test_refresh_responses_are_never_cached(client):
    tokens = login(client, "alice")
    body = {"username": "alice", "refreshToken": tokens["refreshToken"]}
    for response in [
        client.post("/login", json={"username": "alice"}),
        client.post("/token", json=body),
        client.post("/token", json={**body, "username": "bob"}),
    ]:
        assert response.headers["Cache-Control"] == "no-store"
        assert response.headers["Pragma"] == "no-cache"


def test_refresh_token_of_another_user_is_401(client):
    tokens = login(client, "alice")
    response = client.post(
        "/token", json={"username": "bob", "refreshToken": tokens["refreshToken"]}
    )
    assert_unauthorized(response)


@pytest.mark.parametrize("username", ["Alice", "alice ", " alice", "alic", "alicea"])
def test_username_must_match_exactly(client, username):
    tokens = login(client, "alice")
    response = client.post(
        "/token", json={"username": username, "refreshToken": tokens["refreshToken"]}
    )
    assert_unauthorized(response)


def test_access_token_is_not_a_refresh_token(client):
    tokens = login(client, "alice")
    response = client.post(
        "/token", json={"username": "alice", "refreshToken": tokens["accessToken"]}
    )
    assert_unauthorized(response)


def test_refresh_needs_no_authorization_header(client):
    tokens = login(client, "alice")
    response = client.post(
        "/token",
        json={"username": "alice", "refreshToken": tokens["refreshToken"]},
        headers={"Authorization": "Bearer not-a-token"},
    )
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"refreshToken": "x"}, "username is required"),
        ({"username": "alice"}, "refreshToken is required"),
        ({"username": "alice", "refreshToken": 5}, "refreshToken must be a string"),
        ({"username": 1, "refreshToken": "x"}, "username must be a string"),
    ],
)
def test_bad_refresh_fields_are_400(client, body, message):
    response = client.post("/token", json=body)
    assert response.status_code == 400
    assert response.get_json() == {"message": message}


#: Strings that login refuses as a username: a control, separator or bidirectional control
#: anywhere (a trailing NUL or newline among them), only whitespace, empty, too long.
REFUSED_USERNAMES = st.one_of(
    st.builds(
        lambda before, unsafe, after: before + unsafe + after,
        st.text(max_size=20),
        st.from_regex(UNSAFE_USERNAME_CHARACTERS, fullmatch=True),
        st.text(max_size=20),
    ),
    st.sampled_from(["alice\x00", "alice\n", "alice\r\n", "", " ", "\t\n"]),
    st.text(alphabet=" \u00a0\u2003\u3000", min_size=1, max_size=5),
    st.text(alphabet="ab", min_size=257, max_size=300),
)


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(username=REFUSED_USERNAMES, encoding=st.sampled_from(["json", "form"]))
def test_a_username_that_login_refuses_is_the_401_of_another_users_token(
    client, username, encoding
):
    """No refresh token is recorded for such a name: SPEC.md's 401, not a 400."""
    assert client.post("/login", json={"username": username}).status_code == 400
    tokens = login(client, "alice")
    fields = {"username": username, "refreshToken": tokens["refreshToken"]}
    body = {"json": fields} if encoding == "json" else {"data": fields}
    assert_unauthorized(client.post("/token", **body))


def test_a_username_with_a_lone_surrogate_is_401_too(client):
    tokens = login(client, "alice")
    text = json.dumps({"username": "alice", "refreshToken": tokens["refreshToken"]})
    body = text.replace('"alice"', '"alice\\ud800"')
    response = client.post("/token", data=body, content_type="application/json")
    assert_unauthorized(response)
