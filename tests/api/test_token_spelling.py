"""Over HTTP: a token with base64 padding, or naming a member twice, is a 401 like any
malformed token, on the Bearer endpoints and in the cookie of /api/v1/me."""

from __future__ import annotations

import time

import pytest

from tests.helpers.tokens import bearer, header_text, login, sign_texts

pytestmark = [pytest.mark.signing_algorithms("HS256", "EdDSA"), pytest.mark.store("sqlite")]


def with_padding(token: str) -> str:
    return token + "=" * (-len(token.rpartition(".")[2]) % 4)


def test_a_padded_bearer_token_is_401(client):
    token = login(client)["accessToken"]
    assert client.get("/user-accessible", headers=bearer(token)).status_code == 200
    assert with_padding(token) != token
    response = client.get("/user-accessible", headers=bearer(with_padding(token)))
    assert response.status_code == 401
    assert response.data == b"Unauthorized"


def test_a_padded_cookie_token_is_401(client, signing_key):
    exp = int(time.time()) + 60
    key = signing_key.ring.current
    token = sign_texts(key, header_text(key), f'{{"sub":{{"id":"7"}},"exp":{exp}}}')
    client.set_cookie("jwt", token)
    assert client.get("/api/v1/me").get_json() == {"id": "7"}
    client.set_cookie("jwt", with_padding(token))
    assert client.get("/api/v1/me").status_code == 401


def test_a_bearer_token_naming_its_role_twice_is_401(client, signing_key):
    now = int(time.time())
    key = signing_key.ring.current
    claims = f'"username":"alice","role":"user","iat":{now},"exp":{now + 60}'
    token = sign_texts(key, header_text(key), "{" + claims + ',"role":"admin"}')
    assert client.get("/admin-accessible", headers=bearer(token)).status_code == 401
    token = sign_texts(key, header_text(key), "{" + claims + "}")
    assert client.get("/user-accessible", headers=bearer(token)).status_code == 200


def test_a_cookie_token_naming_its_user_twice_is_401(client, signing_key):
    exp = int(time.time()) + 60
    key = signing_key.ring.current
    token = sign_texts(
        key, header_text(key), f'{{"sub":{{"id":"7"}},"sub":{{"id":"8"}},"exp":{exp}}}'
    )
    client.set_cookie("jwt", token)
    assert client.get("/api/v1/me").status_code == 401
