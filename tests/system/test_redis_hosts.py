"""Two hosts behind one proxy: two gunicorns, each with its own instance folder, one Redis."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers.redis_server import INSTALL_HINT, RedisServer, redis_server_available
from tests.helpers.servers import Gunicorn, fresh, gunicorn_environment
from tests.helpers.tools import require_tool

pytestmark = [pytest.mark.redis, pytest.mark.gunicorn, pytest.mark.store("sqlite")]

USERS = 40


@pytest.fixture(scope="module")
def hosts(tmp_path_factory) -> Iterator[tuple[Gunicorn, Gunicorn]]:
    """Two hosts on one Redis, for the module's tests: each uses usernames of its own."""
    require_tool(redis_server_available(), "redis-server", INSTALL_HINT)
    folder = tmp_path_factory.mktemp("redis-hosts")
    redis = RedisServer(folder / "redis").start()
    shared = {"SIGNING_SECRET": secrets.token_urlsafe(48), "TOKEN_STORE_URL": redis.url}
    started: list[Gunicorn] = []
    try:
        for name in ("host-a", "host-b"):
            environment = gunicorn_environment(folder / name, None, shared)
            started.append(Gunicorn(environment, 2, folder / f"{name}.log").start())
        host_a, host_b = started
        assert host_a.port != host_b.port
        yield host_a, host_b
    finally:
        for server in started:
            server.kill()
        redis.stop()


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
