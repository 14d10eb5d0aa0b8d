"""DELETE /token/{refreshToken}: known tokens are removed, unknown ones ignored, always 204."""

from __future__ import annotations

import pytest

from tests.helpers.tokens import bearer, login


def allowed(response) -> set[str]:
    return {method.strip() for method in response.headers["Allow"].split(",")}


def refresh(client, username: str, refresh_token: str):
    return client.post("/token", json={"username": username, "refreshToken": refresh_token})


def test_revoke_known_token_is_204_without_body(client):
    tokens = login(client)
    response = client.delete(f"/token/{tokens['refreshToken']}")
    assert response.status_code == 204
    assert response.data == b""
    assert "Content-Type" not in response.headers


def test_revoked_token_no_longer_refreshes(client):
    tokens = login(client, "alice")
    assert refresh(client, "alice", tokens["refreshToken"]).status_code == 200
    client.delete(f"/token/{tokens['refreshToken']}")
    response = refresh(client, "alice", tokens["refreshToken"])
    assert response.status_code == 401
    assert response.data == b"Unauthorized"


@pytest.mark.parametrize(
    "token", ["x" * 42, "unknown", "a" * 300, "%F0%9F%94%91", "..%2e", "a%2Fb", "%2F", "/x", "%00"]
)
def test_revoke_unknown_token_is_still_204(client, token):
    response = client.delete(f"/token/{token}")
    assert response.status_code == 204
    assert response.data == b""


def test_revoking_twice_is_204_both_times(client):
    token = login(client)["refreshToken"]
    assert client.delete(f"/token/{token}").status_code == 204
    assert client.delete(f"/token/{token}").status_code == 204


def test_revoke_keeps_issued_access_tokens_valid(client):
    tokens = login(client, "alice")
    client.delete(f"/token/{tokens['refreshToken']}")
    response = client.get("/user-accessible", headers=bearer(tokens["accessToken"]))
    assert response.status_code == 200


def test_revoke_leaves_the_users_other_tokens_alone(client):
    first, second = login(client, "alice"), login(client, "alice")
    client.delete(f"/token/{first['refreshToken']}")
    assert refresh(client, "alice", second["refreshToken"]).status_code == 200


def test_revoke_needs_no_authentication_and_ignores_a_body(client):
    token = login(client)["refreshToken"]
    response = client.delete(
        f"/token/{token}", json={"junk": True}, headers={"Authorization": "Bearer nope"}
    )
    assert response.status_code == 204
    assert refresh(client, "alice", token).status_code == 401


@pytest.mark.parametrize("method", ["get", "put", "post", "patch"])
def test_other_methods_on_a_token_path_are_405(client, method):
    response = getattr(client, method)("/token/abc")
    assert response.status_code == 405
    assert allowed(response) == {"DELETE"}
    assert response.get_json() == {"message": "method not allowed"}


def test_token_path_with_slashes_is_an_unknown_token_not_a_redirect(client):
    for path in ["/token/a/b", "/token//x", "/token/a//b/"]:
        response = client.delete(path)
        assert response.status_code == 204, path
        assert response.data == b""


@pytest.mark.parametrize("token", ["%0A", "a%0Ab", "%0D%0A", "%09", "%00", "%7F", "%C3%98%0A"])
def test_token_path_with_control_characters_is_an_unknown_token(client, token):
    response = client.delete(f"/token/{token}")
    assert response.status_code == 204, token
    assert response.data == b""


def test_delete_with_an_empty_token_is_404(client):
    response = client.delete("/token/")
    assert response.status_code == 404
    assert response.get_json() == {"message": "not found"}


def test_delete_on_token_without_segment_is_405(client):
    response = client.delete("/token")
    assert response.status_code == 405
    assert allowed(response) == {"POST"}
