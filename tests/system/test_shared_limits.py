"""The limits that hosts and workers share through a store: the per-address rate limit
and the per-username failed-login limit across a host's gunicorn workers, the rate limit
across two hosts on one Redis, and the rate limit when that Redis refuses or stops."""

from __future__ import annotations

import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from argon2 import PasswordHasher

from app.backends.sqlite.counters import COUNTERS_FILE_NAME
from tests.helpers.limits import counted_failures, limiter_messages, log_in
from tests.helpers.servers import fresh
from tests.helpers.users import write_users

BURST, LIMIT = 40, 10
#: The failed-login limit's default: 10 failures a minute for one username.
FAILURES = 10
PASSWORD = "correct horse battery"


@pytest.mark.own_store
@pytest.mark.redis
def test_a_redis_that_refuses_the_counters_lets_logins_through_logged_once_and_counted(
    make_app, redis_server, caplog
):
    server = redis_server()
    with server.client() as admin:  # a service user confined to the token store's keys
        admin.execute_command("ACL", "SETUSER", "service", "on", ">pw-for-tests", "~rt:*", "+@all")
    url = server.url.replace("redis://", "redis://service:pw-for-tests@")
    client = make_app(TOKEN_STORE_URL=url, RATE_LIMIT_AUTH="1 per minute").test_client()
    failures = counted_failures(client)
    caplog.set_level(logging.WARNING)
    tokens = [log_in(client).get_json() for _ in range(4)]
    assert all(len(body["refreshToken"]) == 42 for body in tokens)  # 200s: the store works
    assert len(failures) == 4
    (message,) = limiter_messages(caplog)
    assert "NoPermissionError" in message
    assert "pw-for-tests" not in caplog.text


@pytest.mark.own_store
@pytest.mark.redis
def test_a_stopped_redis_is_the_stores_503_and_the_limiter_logs_once(
    make_app, redis_server, caplog
):
    server = redis_server()
    client = make_app(TOKEN_STORE_URL=server.url, RATE_LIMIT_AUTH="1 per minute").test_client()
    failures = counted_failures(client)
    server.stop()
    caplog.set_level(logging.WARNING)
    for _ in range(3):
        response = log_in(client)
        assert response.status_code == 503  # the store's answer, not a 429 or a 500
    assert len(failures) == 3
    assert len(limiter_messages(caplog)) == 1


BURST_PASSWORD = "correct horse battery staple"


def burst(urls: list[str], address: str) -> list[tuple[str, int, str | None]]:
    """Send BURST logins from ``address`` (as a proxy forwards it) on new connections."""

    def one(n: int) -> tuple[str, int, str | None]:
        url = urls[n % len(urls)]
        response = fresh(
            "POST",
            f"{url}/login",
            json={"username": f"user{n}", "password": BURST_PASSWORD},
            headers={"X-Forwarded-For": address},
        )
        return url, response.status_code, response.headers.get("Retry-After")

    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(one, range(BURST)))


def workers_holding(server, name: str) -> int:
    """Return how many of the server's workers have the file ``name`` open."""
    holding = 0
    for pid in server.worker_pids():
        descriptors = Path(f"/proc/{pid}/fd")
        links = [os.readlink(entry) for entry in descriptors.iterdir() if entry.is_symlink()]
        holding += any(link.endswith(name) for link in links)
    return holding


@pytest.mark.gunicorn
@pytest.mark.store("sqlite")
def test_the_rate_limit_holds_across_the_workers_of_a_host(
    gunicorn_server, signing_secret, tmp_path
):
    # With USERS_FILE each allowed login spends an Argon2 check (about 25 ms) on its
    # worker, so a concurrent burst cannot be answered by one worker alone.
    users_file = tmp_path / "users.json"
    hashed = PasswordHasher().hash(BURST_PASSWORD)
    users_file.write_text(json.dumps({f"user{n}": hashed for n in range(BURST)}))
    server = gunicorn_server(
        {
            "SIGNING_SECRET": signing_secret,
            "TRUSTED_PROXIES": "127.0.0.1/32",
            "RATE_LIMIT_AUTH": f"{LIMIT} per minute",
            "USERS_FILE": str(users_file),
        },
        workers=3,
    )
    answers = burst([server.url], "198.51.100.20")
    statuses = [status for _, status, _ in answers]
    assert statuses.count(200) == LIMIT, statuses  # every request came within one window
    assert statuses.count(429) == BURST - LIMIT
    assert all(1 <= int(wait) <= 60 for _, status, wait in answers if status == 429)
    assert workers_holding(server, COUNTERS_FILE_NAME) >= 2  # several workers counted
    # another address has its own budget; the host itself (no forwarded address) is exempt
    login = {"username": "user0", "password": BURST_PASSWORD}
    assert fresh("POST", f"{server.url}/login", json=login).status_code == 200


@pytest.mark.gunicorn
@pytest.mark.redis
@pytest.mark.store("sqlite")
def test_the_limit_holds_across_two_hosts_sharing_one_redis(
    gunicorn_server, redis_server, signing_secret, tmp_path
):
    redis_store = redis_server()
    shared = {
        "SIGNING_SECRET": signing_secret,
        "TOKEN_STORE_URL": redis_store.url,
        "TRUSTED_PROXIES": "127.0.0.1/32",
        "OPEN_LOGIN": "true",
        "RATE_LIMIT_AUTH": f"{LIMIT} per minute",
    }
    hosts = [
        gunicorn_server({**shared, "INSTANCE_PATH": str(tmp_path / name)}, workers=2)
        for name in ("host-a", "host-b")
    ]
    answers = burst([host.url for host in hosts], "198.51.100.30")
    answered = [url for url, status, _ in answers if status == 200]
    assert len(answered) == LIMIT, answers
    assert {host.url for host in hosts} == set(answered)  # both hosts answered some
    assert all(status in {200, 429} for _, status, _ in answers)
    with redis_store.client() as client:
        keys = client.keys("*")
    limiter_keys = [key for key in keys if not key.startswith("rt:")]
    assert limiter_keys
    assert all(key.startswith("rl:") for key in limiter_keys)


@pytest.mark.gunicorn
@pytest.mark.store("sqlite")
def test_the_failed_login_limit_holds_across_the_workers_of_a_host(
    gunicorn_server, signing_secret, tmp_path
):
    users_file = tmp_path / "users.json"
    write_users(users_file, alice=PASSWORD, bob=PASSWORD)
    server = gunicorn_server(
        {"SIGNING_SECRET": signing_secret, "USERS_FILE": str(users_file)}, workers=3
    )

    def guess(n: int) -> int:
        body = {"username": "alice", "password": f"guess {n}"}
        return fresh("POST", f"{server.url}/login", json=body).status_code

    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = list(pool.map(guess, range(3 * FAILURES)))
    assert statuses.count(401) == FAILURES, statuses
    assert statuses.count(429) == 2 * FAILURES
    right = {"username": "alice", "password": PASSWORD}
    assert fresh("POST", f"{server.url}/login", json=right).status_code == 429
    right["username"] = "bob"
    assert fresh("POST", f"{server.url}/login", json=right).status_code == 200
