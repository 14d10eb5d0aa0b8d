"""Faults: Redis stopped, frozen or restarted under a running service; a worker killed mid-burst."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
import requests

from tests.helpers.redis_server import DURABLE
from tests.helpers.servers import fresh, wait_until
from tests.helpers.tokens import login

#: TOKEN_STORE_TIMEOUT's default: what an operator who sets nothing gets.
DEFAULT_TIMEOUT = 2.0
#: Slack on top of the store timeout for one answer of a loaded 2-core machine.
SLACK = 1.0
#: Longest wait for the service to serve again once Redis is back.
RECOVERY_BOUND = 10.0


def assert_store_unavailable(response: requests.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["Retry-After"] == "1"
    assert response.json() == {"message": "token store is unavailable, try again shortly"}


@dataclass
class Answer:
    kind: str
    started: float
    finished: float
    status: int
    response: requests.Response

    @property
    def latency(self) -> float:
        return self.finished - self.started


class Client(threading.Thread):
    """Loops login, revoke, refresh and a protected call until told to stop (or 2000 answers)."""

    def __init__(self, url: str, username: str, tokens: dict[str, str], answers: list[Answer]):
        super().__init__(daemon=True)
        self.url, self.username, self.tokens, self.answers = url, username, tokens, answers
        self.done = threading.Event()
        self.error: BaseException | None = None

    def call(self, kind: str, method: str, path: str, **kwargs) -> requests.Response:
        started = time.monotonic()
        response = fresh(method, self.url + path, **kwargs)
        self.answers.append(Answer(kind, started, time.monotonic(), response.status_code, response))
        return response

    def run(self) -> None:
        try:
            self.loop()
        except BaseException as error:  # reported by the test, not lost with the thread
            self.error = error

    def loop(self) -> None:
        bearer = {"Authorization": f"Bearer {self.tokens['accessToken']}"}
        refresh = {"username": self.username, "refreshToken": self.tokens["refreshToken"]}
        for _ in range(500):  # 4 answers each
            if self.done.is_set():
                return
            response = self.call("login", "POST", "/login", json={"username": self.username})
            if response.status_code == 200:
                self.call("revoke", "DELETE", f"/token/{response.json()['refreshToken']}")
            else:
                self.call("revoke", "DELETE", "/token/neverissued")
            self.call("refresh", "POST", "/token", json=refresh)
            self.call("protected", "GET", "/user-accessible", headers=bearer)


@pytest.mark.own_store
@pytest.mark.redis
@pytest.mark.gunicorn
def test_a_redis_outage_mid_run_is_503_then_the_service_recovers_by_itself(
    gunicorn_server, redis_server, signing_secret
):
    redis = redis_server(*DURABLE)  # the tokens issued before the outage survive it
    server = gunicorn_server(
        {"SIGNING_SECRET": signing_secret, "TOKEN_STORE_URL": redis.url,
         "ACCESS_TOKEN_LIFETIME": "600"},
        workers=2,
    )  # fmt: skip
    answers: list[Answer] = []
    clients = []
    for n in range(4):
        username = f"user{n}"
        tokens = fresh("POST", f"{server.url}/login", json={"username": username}).json()
        clients.append(Client(server.url, username, tokens, answers))

    def wait_for_answers(count: int, after: float) -> None:
        wait_until(
            lambda: sum(answer.started >= after for answer in answers) >= count,
            30,
            f"{count} answers",
        )

    for client in clients:
        client.start()
    try:
        wait_for_answers(40, after=0)
        redis.stop()  # SIGTERM by PID, in the middle of the clients' requests
        stopped = time.monotonic()
        wait_for_answers(60, after=stopped)
        restarting = time.monotonic()
        redis.start()  # same port, same --dir
        restarted = time.monotonic()
        wait_until(
            lambda: fresh("POST", f"{server.url}/login", json={"username": "probe"}).ok,
            RECOVERY_BOUND,
            "the service after Redis came back",
        )
        recovered = time.monotonic()
        wait_for_answers(60, after=recovered)
    finally:
        for client in clients:
            client.done.set()
        for client in clients:
            client.join(30)
    assert [client.error for client in clients] == [None] * len(clients)
    print(f"recovery: {recovered - restarted:.3f} s after Redis answered PING")

    allowed = {"login": {200, 503}, "revoke": {204, 503}, "refresh": {200, 503}, "protected": {200}}
    for answer in answers:
        assert answer.status in allowed[answer.kind], (answer.kind, answer.response.text)
        if answer.status == 503:
            assert_store_unavailable(answer.response)
            assert answer.latency < DEFAULT_TIMEOUT + SLACK
    during = [a for a in answers if a.started >= stopped and a.finished <= restarting]
    after = [a for a in answers if a.started >= recovered]
    assert {a.kind for a in during} == set(allowed)
    assert all(a.status == 503 for a in during if a.kind != "protected")
    assert all(a.status in {200, 204} for a in after), [(a.kind, a.status) for a in after]
    assert len(after) >= 60


@pytest.mark.own_store
@pytest.mark.redis
@pytest.mark.gunicorn
def test_a_frozen_redis_is_503_within_the_timeout_and_protected_calls_still_200(
    gunicorn_server, redis_server, signing_secret
):
    timeout = 0.5
    redis = redis_server()
    server = gunicorn_server(
        {"SIGNING_SECRET": signing_secret, "TOKEN_STORE_URL": redis.url,
         "TOKEN_STORE_TIMEOUT": str(timeout)},
        workers=2,
    )  # fmt: skip
    tokens = fresh("POST", f"{server.url}/login", json={"username": "alice"}).json()
    bearer = {"Authorization": f"Bearer {tokens['accessToken']}"}
    body = {"username": "alice", "refreshToken": tokens["refreshToken"]}
    redis.freeze()  # SIGSTOP: connections are accepted, nothing is answered
    try:
        for _ in range(2):
            for method, path, kwargs in [
                ("POST", "/login", {"json": {"username": "bob"}}),
                ("POST", "/token", {"json": body}),
                ("DELETE", f"/token/{tokens['refreshToken']}", {}),
            ]:
                started = time.monotonic()
                response = fresh(method, server.url + path, **kwargs)
                assert_store_unavailable(response)
                assert time.monotonic() - started < timeout + SLACK
            response = fresh("GET", f"{server.url}/user-accessible", headers=bearer)
            assert response.status_code == 200
            assert fresh("GET", f"{server.url}/readyz").status_code == 503
    finally:
        redis.thaw()
    wait_until(
        lambda: fresh("POST", f"{server.url}/token", json=body).status_code == 200,
        RECOVERY_BOUND,
        "refresh after Redis thawed",
    )


@pytest.mark.own_store
@pytest.mark.redis
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_refresh_tokens_survive_a_redis_restart_with_appendonly(make_app, redis_server, how):
    redis = redis_server(*DURABLE)
    client = make_app(TOKEN_STORE_URL=redis.url).test_client()
    issued = {f"user{n}": login(client, f"user{n}")["refreshToken"] for n in range(60)}
    revoked = {name: token for name, token in issued.items() if name.endswith("7")}
    for token in revoked.values():
        assert client.delete(f"/token/{token}").status_code == 204
    if how == "SIGTERM":
        redis.stop()
    else:
        redis.kill()  # no shutdown: only what appendfsync always put on disk
    redis.start()
    for username, token in issued.items():
        response = client.post("/token", json={"username": username, "refreshToken": token})
        assert response.status_code == (401 if username in revoked else 200), username


@pytest.mark.own_store
@pytest.mark.gunicorn
def test_sqlite_every_login_answered_200_survives_a_worker_killed_mid_burst(
    gunicorn_server, tmp_path, signing_secret
):
    logins, kills, workers = 300, (60, 120, 180), 3
    (tmp_path / "burst").mkdir()
    server = gunicorn_server(
        {"SIGNING_SECRET": signing_secret,
         "TOKEN_STORE_URL": f"sqlite:///{tmp_path / 'burst' / 'refresh_tokens.sqlite3'}"},
        workers=workers,
    )  # fmt: skip
    delivered: list[tuple[str, str]] = []
    lost: list[Exception] = []
    answered = threading.Semaphore(0)

    def log_in(n: int) -> None:
        username = f"user{n}"
        try:
            response = fresh("POST", f"{server.url}/login", json={"username": username})
        except requests.RequestException as error:  # in flight on a killed worker: not delivered
            lost.append(error)
            return
        finally:
            answered.release()
        assert response.status_code == 200, response.text
        delivered.append((username, response.json()["refreshToken"]))

    victims = []
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(log_in, n) for n in range(logins)]
        seen = 0
        for kill_at in kills:
            while seen < kill_at:
                assert answered.acquire(timeout=30)
                seen += 1
            victim = next(pid for pid in server.worker_pids() if pid not in victims)
            os.kill(victim, signal.SIGKILL)
            victims.append(victim)
        for future in futures:
            future.result(timeout=60)
    print(f"{len(delivered)} logins answered 200, {len(lost)} lost with the killed workers")
    assert len(delivered) + len(lost) == logins
    assert len(delivered) >= logins - 8 * len(kills)  # at most the requests in flight
    wait_until(
        lambda: server.replaced(victims, workers), 20, "gunicorn replacing the killed workers"
    )
    for username, token in delivered:
        body = {"username": username, "refreshToken": token}
        response = fresh("POST", f"{server.url}/token", json=body)
        assert response.status_code == 200, username
