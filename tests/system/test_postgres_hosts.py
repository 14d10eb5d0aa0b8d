"""Two hosts behind one proxy: two gunicorns, each with its own instance folder, one
PostgreSQL. What Redis gives several hosts, PostgreSQL gives too: a token from one host
refreshes on the other, a revoke is refused everywhere at once, concurrent rotations of
one token on two hosts let exactly one win, and a restart of the database under load
loses no acknowledged login."""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests.helpers.servers import fresh

pytestmark = [pytest.mark.postgres, pytest.mark.gunicorn, pytest.mark.store("sqlite")]

USERS = 40


@pytest.fixture
def database(postgres_server):
    return postgres_server()  # PostgreSQL's durable defaults (fsync on)


def two_hosts(gunicorn_server, signing_secret, tmp_path, url: str, workers=2, **settings: str):
    shared = {"SIGNING_SECRET": signing_secret, "TOKEN_STORE_URL": url, **settings}
    host_a = gunicorn_server({**shared, "INSTANCE_PATH": str(tmp_path / "host-a")}, workers)
    host_b = gunicorn_server({**shared, "INSTANCE_PATH": str(tmp_path / "host-b")}, workers)
    return host_a, host_b


ROTATION_TRIALS = 20


def test_tokens_cross_hosts_a_revoke_holds_at_once_and_one_of_concurrent_rotations_wins(
    gunicorn_server, signing_secret, tmp_path, database
):
    host_a, host_b = two_hosts(
        gunicorn_server, signing_secret, tmp_path, database.url(), REFRESH_TOKEN_ROTATION="true"
    )

    def cross(n: int) -> None:
        username = f"user{n}:é"
        tokens = fresh("POST", f"{host_a.url}/login", json={"username": username}).json()
        body = {"username": username, "refreshToken": tokens["refreshToken"]}
        stranger = {"username": "someone else", "refreshToken": tokens["refreshToken"]}
        assert fresh("POST", f"{host_b.url}/token", json=stranger).status_code == 401
        response = fresh("POST", f"{host_b.url}/token", json=body)
        assert response.status_code == 200, response.text
        successor = {"username": username, "refreshToken": response.json()["refreshToken"]}
        assert fresh("DELETE", f"{host_a.url}/token/{successor['refreshToken']}").status_code == 204
        response = fresh("POST", f"{host_b.url}/token", json=successor)  # the very next request
        assert (response.status_code, response.text) == (401, "Unauthorized")

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(cross, range(USERS)))

    # one token presented at once on both hosts, twice each: one rotation, one reuse
    for n in range(ROTATION_TRIALS):
        username = f"rotating{n}"
        tokens = fresh("POST", f"{host_a.url}/login", json={"username": username}).json()
        body = {"username": username, "refreshToken": tokens["refreshToken"]}
        start = threading.Barrier(4, timeout=30)

        def rotate(host, body=body, start=start) -> requests.Response:
            start.wait()
            return fresh("POST", f"{host.url}/token", json=body)

        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(rotate, [host_a, host_b, host_a, host_b]))
        assert sorted(answer.status_code for answer in answers) == [200, 401, 401, 401]
        (winner,) = [answer.json() for answer in answers if answer.status_code == 200]
        # the second presentation was reuse: the family, the winner's successor with it, is gone
        successor = {"username": username, "refreshToken": winner["refreshToken"]}
        assert fresh("POST", f"{host_b.url}/token", json=successor).status_code == 401


LOAD_SECONDS_CAP = 60
LOGINS_CAP = 3000


def test_a_database_restart_under_load_loses_no_acknowledged_login(
    gunicorn_server, signing_secret, tmp_path, database
):
    host_a, host_b = two_hosts(  # a worker each: what matters is the database's restarts
        gunicorn_server, signing_secret, tmp_path, database.url(), 1, TOKEN_STORE_TIMEOUT="1"
    )
    acknowledged: list[tuple[str, str]] = []
    refused: Counter = Counter()
    stop = threading.Event()
    deadline = time.monotonic() + LOAD_SECONDS_CAP

    def log_in(worker: int) -> None:
        host = (host_a, host_b)[worker % 2]
        for n in range(LOGINS_CAP // 4):
            if stop.is_set() or time.monotonic() > deadline:
                return
            username = f"w{worker}-{n}"
            try:
                response = fresh("POST", f"{host.url}/login", json={"username": username})
            except requests.ConnectionError:
                refused["connection"] += 1
                continue
            if response.status_code == 200:
                acknowledged.append((username, response.json()["refreshToken"]))
            else:
                assert response.status_code == 503, response.text  # never a 500
                assert response.json() == {
                    "message": "token store is unavailable, try again shortly"
                }
                refused[503] += 1

    with ThreadPoolExecutor(4) as pool:
        loading = [pool.submit(log_in, worker) for worker in range(4)]
        wait_for(lambda: len(acknowledged) >= 40)
        database.stop()  # a clean, fast shutdown: connections are cut mid-request
        wait_for(lambda: refused[503] >= 4)
        database.start()
        answered = len(acknowledged)
        wait_for(lambda: len(acknowledged) >= answered + 40)  # it recovered by itself
        database.kill()  # a crash: no shutdown, no last write
        wait_for(lambda: refused[503] >= 8)
        database.start()
        answered = len(acknowledged)
        wait_for(lambda: len(acknowledged) >= answered + 40)
        stop.set()
        for future in loading:
            future.result()

    def refreshes(pair: tuple[str, str]) -> int:
        username, token = pair
        body = {"username": username, "refreshToken": token}
        return fresh("POST", f"{host_b.url}/token", json=body).status_code

    with ThreadPoolExecutor(4) as pool:
        statuses = Counter(pool.map(refreshes, acknowledged))
    assert statuses == {200: len(acknowledged)}


def wait_for(check, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.02)
