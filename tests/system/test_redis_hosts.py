"""Two hosts behind one proxy: two gunicorns, each with its own instance folder, one Redis."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers.servers import fresh

pytestmark = [pytest.mark.redis, pytest.mark.gunicorn, pytest.mark.store("sqlite")]

USERS = 40


@pytest.fixture
def hosts(gunicorn_server, redis_server, signing_secret, tmp_path):
    redis = redis_server()
    shared = {"SIGNING_SECRET": signing_secret, "TOKEN_STORE_URL": redis.url}
    host_a = gunicorn_server({**shared, "INSTANCE_PATH": str(tmp_path / "host-a")}, workers=2)
    host_b = gunicorn_server({**shared, "INSTANCE_PATH": str(tmp_path / "host-b")}, workers=2)
    assert host_a.port != host_b.port
    return host_a, host_b


def test_a_refresh_token_from_host_a_refreshes_on_host_b(hosts):
    host_a, host_b = hosts

    def cross(n: int) -> None:
        username = f"user{n}:é"
        tokens = fresh("POST", f"{host_a.url}/login", json={"username": username}).json()
        bearer = {"Authorization": f"Bearer {tokens['accessToken']}"}
        assert fresh("GET", f"{host_b.url}/user-accessible", headers=bearer).status_code == 200
        body = {"username": username, "refreshToken": tokens["refreshToken"]}
        response = fresh("POST", f"{host_b.url}/token", json=body)
        assert response.status_code == 200, response.text
        refreshed = {"Authorization": f"Bearer {response.json()['accessToken']}"}
        assert fresh("GET", f"{host_a.url}/user-accessible", headers=refreshed).status_code == 200
        stranger = {"username": "someone else", "refreshToken": tokens["refreshToken"]}
        assert fresh("POST", f"{host_b.url}/token", json=stranger).status_code == 401

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(cross, range(USERS)))


def test_a_revoke_on_host_a_is_refused_on_host_b_at_once(hosts):
    host_a, host_b = hosts
    for n in range(USERS):
        username = f"user{n}"
        tokens = fresh("POST", f"{host_b.url}/login", json={"username": username}).json()
        body = {"username": username, "refreshToken": tokens["refreshToken"]}
        assert fresh("POST", f"{host_b.url}/token", json=body).status_code == 200
        assert fresh("DELETE", f"{host_a.url}/token/{tokens['refreshToken']}").status_code == 204
        response = fresh("POST", f"{host_b.url}/token", json=body)  # the very next request
        assert response.status_code == 401
        assert response.text == "Unauthorized"
