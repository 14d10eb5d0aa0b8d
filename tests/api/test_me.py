"""GET /api/v1/me: the third-party user named by the signed cookie token."""

from __future__ import annotations

import time

import pytest

from app.auth.tokens import issue_cookie_token
from tests.helpers.tokens import bearer, login, make_token, unsigned_token

pytestmark = pytest.mark.signing_algorithms("HS256", "EdDSA", "ES256")

USER = {"source": "corp", "id": "248289761001", "shownName": "Jane Doe"}


def cookie_claims(**changes):
    claims = {"sub": dict(USER), "exp": int(time.time()) + 60}
    claims.update(changes)
    return {key: value for key, value in claims.items() if value is not None}


def me(client, token: str | None = None, cookie_name: str = "jwt"):
    if token is not None:
        client.set_cookie(cookie_name, token)
    return client.get("/api/v1/me")


def assert_401(response) -> None:
    assert response.status_code == 401
    assert response.data == b"Unauthorized"
    assert response.mimetype == "text/plain"


def test_valid_cookie_returns_the_user(client, signing_key):
    response = me(client, issue_cookie_token(USER, signing_key.ring, 60))
    assert response.status_code == 200
    assert response.get_json() == USER


def test_absent_user_fields_are_left_out(client, signing_key):
    response = me(client, make_token(signing_key, cookie_claims(sub={"id": "7"})))
    assert response.status_code == 200
    assert response.get_json() == {"id": "7"}


def test_only_the_user_fields_are_returned(client, signing_key):
    token = make_token(signing_key, cookie_claims(sub={**USER, "role": "admin"}))
    assert me(client, token).get_json() == USER


def test_float_exp_in_the_future_is_accepted(client, signing_key):
    token = make_token(signing_key, cookie_claims(exp=time.time() + 60))
    assert me(client, token).status_code == 200


def test_cookie_name_comes_from_settings(make_app, signing_key):
    client = make_app(AUTH_COOKIE_NAME="session_token").test_client()
    token = issue_cookie_token(USER, signing_key.ring, 60)
    assert me(client, token, cookie_name="jwt").status_code == 401
    assert me(client, token, cookie_name="session_token").get_json() == USER


def test_no_cookie_is_401(client):
    assert_401(me(client))


def test_empty_cookie_is_401(client):
    assert_401(me(client, ""))


def test_bad_signature_is_401(client):
    assert_401(me(client, make_token("x" * 40, cookie_claims())))


def test_alg_none_is_401(client):
    assert_401(me(client, unsigned_token(cookie_claims())))


def test_other_algorithm_is_401(client, signing_secret):
    assert_401(me(client, make_token(signing_secret, cookie_claims(), algorithm="HS512")))


def test_expired_is_401(client, signing_key):
    assert_401(me(client, make_token(signing_key, cookie_claims(exp=int(time.time()) - 5))))


def test_exp_equal_to_now_is_401(client, signing_key):
    assert_401(me(client, make_token(signing_key, cookie_claims(exp=int(time.time())))))


def test_missing_exp_is_401(client, signing_key):
    token = make_token(signing_key, {"sub": USER})
    assert_401(me(client, token))


@pytest.mark.parametrize(
    "sub",
    [None, "user-123", 123, ["corp", "1"], True, {"id": 5}, {"source": None}],
    ids=repr,
)
def test_sub_missing_or_not_an_object_of_strings_is_401(client, signing_key, sub):
    claims = cookie_claims(sub=sub) if sub is not None else {"exp": int(time.time()) + 60}
    assert_401(me(client, make_token(signing_key, claims)))


def test_garbage_cookie_is_401(client):
    assert_401(me(client, "not-a-jwt"))


def test_login_access_token_in_the_cookie_is_401(client):
    access_token = login(client)["accessToken"]
    assert_401(me(client, access_token))


def test_bearer_header_does_not_authenticate_me(client, signing_key):
    cookie_token = issue_cookie_token(USER, signing_key.ring, 60)
    assert_401(client.get("/api/v1/me", headers=bearer(cookie_token)))
    assert_401(client.get("/api/v1/me", headers=bearer(login(client)["accessToken"])))


def test_cookie_token_never_authenticates_bearer_endpoints(client, signing_key):
    cookie_token = issue_cookie_token(USER, signing_key.ring, 60)
    client.set_cookie("jwt", cookie_token)
    for path in ["/user-accessible", "/admin-accessible"]:
        response = client.get(path)
        assert response.status_code == 401
    # nor is it an access token when sent as one
    assert client.get("/user-accessible", headers=bearer(cookie_token)).status_code == 401


def test_me_is_get_only(client):
    response = client.post("/api/v1/me")
    assert response.status_code == 405
    assert response.get_json() == {"message": "method not allowed"}
