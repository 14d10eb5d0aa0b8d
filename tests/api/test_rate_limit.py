"""RATE_LIMIT_AUTH: per-address limits on /login and /token, shared by every worker and host."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from argon2 import PasswordHasher

from app.backends.interface import SQLITE_FILE_NAME
from app.config.parsers import ConfigError
from app.config.settings import DEFAULT_RATE_LIMIT_AUTH, Settings
from tests.api.test_openapi import assert_documented, document_of
from tests.helpers.clock import ManualClock
from tests.helpers.servers import fresh
from tests.helpers.tokens import login
from tests.helpers.tools import ROOT

#: An address that no default exempts (TEST-NET-3), as a proxy would forward it.
CLIENT = "203.0.113.7"
SOMEONE_ELSE = "198.51.100.9"


def from_address(address: str = CLIENT) -> dict:
    return {"environ_base": {"REMOTE_ADDR": address}}


def log_in(client, address: str = CLIENT, username: str = "alice"):
    return client.post("/login", json={"username": username}, **from_address(address))


def refresh(client, token: str, address: str = CLIENT, username: str = "alice"):
    body = {"username": username, "refreshToken": token}
    return client.post("/token", json=body, **from_address(address))


def request_lines(capfd) -> list[dict]:
    return [json.loads(line) for line in capfd.readouterr().out.splitlines() if line[:1] == "{"]


def assert_too_many_requests(response, window: int) -> None:
    assert response.status_code == 429
    assert response.content_type == "application/json"
    assert response.get_json() == {"message": "too many requests"}
    assert 1 <= int(response.headers["Retry-After"]) <= window
    assert response.headers["Cache-Control"] == "no-store"
    assert response.headers["X-Content-Type-Options"] == "nosniff"


# --- the setting ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "limits"),
    [
        ("20 per second; 600 per minute", [(20, 1), (600, 60)]),
        ("100 per minute; 5 per second", [(5, 1), (100, 60)]),  # shortest window first
        ("10/second", [(10, 1)]),
        ("3 per 2 minutes", [(3, 120)]),
        (" 1 per hour ", [(1, 3600)]),
        ("5 per minute; 5 per 60 seconds", [(5, 60)]),  # one counter, not two
    ],
)
def test_rate_limit_auth_reads_flask_limiters_notation(tmp_path, value, limits):
    settings = Settings.load({"RATE_LIMIT_AUTH": value, "INSTANCE_PATH": str(tmp_path)})
    assert [(item.amount, item.get_expiry()) for item in settings.rate_limit_auth] == limits


def test_the_default_limit_is_20_per_second_and_600_per_minute(tmp_path):
    settings = Settings.load({"INSTANCE_PATH": str(tmp_path)})
    assert DEFAULT_RATE_LIMIT_AUTH == "20 per second; 600 per minute"
    assert [(item.amount, item.get_expiry()) for item in settings.rate_limit_auth] == [
        (20, 1),
        (600, 60),
    ]
    assert [str(network) for network in settings.rate_limit_exempt] == ["127.0.0.0/8", "::1/128"]


@pytest.mark.parametrize("value", ["off", "OFF", " off "])
def test_rate_limit_auth_off_is_no_limit(tmp_path, value):
    settings = Settings.load({"RATE_LIMIT_AUTH": value, "INSTANCE_PATH": str(tmp_path)})
    assert settings.rate_limit_auth == ()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "RATE_LIMIT_AUTH must be rate limits"),
        ("lots", "RATE_LIMIT_AUTH must be rate limits"),
        ("5 per fortnight", "RATE_LIMIT_AUTH must be rate limits"),
        ("5 per second;; 6", "RATE_LIMIT_AUTH must be rate limits"),
        ("0 per second", "a limit must allow at least 1 request"),
        ("5 per 0 seconds", "a window must be at least 1"),
        ("5/0 minutes", "a window must be at least 1"),
    ],
)
def test_a_bad_rate_limit_refuses_to_start(tmp_path, value, message):
    with pytest.raises(ConfigError, match=message):
        Settings.load({"RATE_LIMIT_AUTH": value, "INSTANCE_PATH": str(tmp_path)})


def test_a_bad_rate_limit_stops_gunicorn_in_one_line(tmp_path):
    env = {"PATH": os.environ["PATH"], "RATE_LIMIT_AUTH": "many", "INSTANCE_PATH": str(tmp_path)}
    command = [sys.executable, "-c", "import runpy; runpy.run_path('gunicorn.conf.py')"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "configuration error: RATE_LIMIT_AUTH must be rate limits, e.g. '20 per second;"
        " 600 per minute', or off; got 'many'"
    ]


@pytest.mark.parametrize("value", ["10.0.0.0/33", "localhost", "10.0.0.1/8"])
def test_a_bad_exempt_network_refuses_to_start(tmp_path, value):
    with pytest.raises(ConfigError, match="RATE_LIMIT_EXEMPT must be comma-separated"):
        Settings.load({"RATE_LIMIT_EXEMPT": value, "INSTANCE_PATH": str(tmp_path)})


# --- the limit, in process (on each store) ---------------------------------------------


def test_the_request_after_the_limit_is_429_with_retry_after(make_app, capfd):
    client = make_app(RATE_LIMIT_AUTH="3 per minute").test_client()
    for _ in range(3):
        assert log_in(client).status_code == 200
    capfd.readouterr()
    assert_too_many_requests(log_in(client), 60)
    (line,) = request_lines(capfd)
    assert (line["status"], line["reason"], line["event"], line["client"]) == (
        429,
        "rate_limited",
        "rate_limited",
        CLIENT,
    )


def test_login_and_token_each_count_on_their_own(make_app):
    client = make_app(RATE_LIMIT_AUTH="2 per minute").test_client()
    token = login(client)["refreshToken"]  # from loopback: not counted
    for _ in range(2):
        assert log_in(client).status_code == 200
    assert log_in(client).status_code == 429
    for _ in range(2):
        assert refresh(client, token).status_code == 200
    assert_too_many_requests(refresh(client, token), 60)


def revoke(client, token: str, address: str = CLIENT):
    return client.delete(f"/token/{token}", **from_address(address))


def test_revocation_is_limited_on_its_own_and_stays_204_under_the_limit(make_app, capfd):
    """DELETE /token/... counts apart from /login and /token; under the limit it is SPEC.md's
    204 for a known token as for an unknown one, and over it the 429 of the other two,
    before the store is reached (the known token stays)."""
    app = make_app(RATE_LIMIT_AUTH="3 per minute")
    client = app.test_client()
    known = [login(client)["refreshToken"] for _ in range(4)]  # from loopback: not counted
    assert log_in(client).status_code == 200
    for token in [known[0], "x" * 42, known[1]]:
        response = revoke(client, token)
        assert (response.status_code, response.data) == (204, b"")
        assert response.headers["Cache-Control"] == "no-store"
    capfd.readouterr()
    assert_too_many_requests(revoke(client, known[2]), 60)
    (line,) = request_lines(capfd)
    assert (line["status"], line["reason"], line["event"]) == (429, "rate_limited", "rate_limited")
    assert known[2] not in json.dumps(line)
    assert refresh(client, known[2]).status_code == 200  # not revoked; /token has room
    assert revoke(client, known[2], SOMEONE_ELSE).status_code == 204
    assert refresh(client, known[2], SOMEONE_ELSE).status_code == 401
    assert revoke(client, known[3], "127.0.0.1").status_code == 204  # exempt as ever


def test_refused_bodies_count_too_and_the_429_comes_before_the_body_is_read(make_app):
    client = make_app(RATE_LIMIT_AUTH="2 per minute").test_client()
    for _ in range(2):
        response = client.post(
            "/login", data="{", content_type="application/json", **from_address()
        )
        assert response.status_code == 400
    response = client.post("/login", data="{", content_type="application/json", **from_address())
    assert response.status_code == 429


def test_each_address_counts_on_its_own(make_app):
    client = make_app(RATE_LIMIT_AUTH="1 per minute").test_client()
    assert log_in(client, CLIENT).status_code == 200
    assert log_in(client, CLIENT).status_code == 429
    assert log_in(client, SOMEONE_ELSE).status_code == 200


def test_ipv6_addresses_count_by_their_64_and_mapped_ipv4_as_ipv4(make_app):
    client = make_app(RATE_LIMIT_AUTH="1 per minute").test_client()
    assert log_in(client, "2001:db8:1:2::1").status_code == 200
    assert log_in(client, "2001:db8:1:2:ffff::9").status_code == 429  # the same /64
    assert log_in(client, "2001:db8:1:3::1").status_code == 200  # the next /64
    assert log_in(client, "::ffff:192.0.2.1").status_code == 200
    assert log_in(client, "192.0.2.1").status_code == 429
    assert log_in(client, "::ffff:127.0.0.1").status_code == 200  # loopback, exempt


def test_loopback_is_exempt_by_default_and_when_the_list_is_emptied_is_not(make_app):
    client = make_app(RATE_LIMIT_AUTH="1 per minute").test_client()
    for address in ["127.0.0.1", "127.0.0.1", "127.9.9.9", "::1", "::1"]:
        assert log_in(client, address).status_code == 200
    strict = make_app(RATE_LIMIT_AUTH="1 per minute", RATE_LIMIT_EXEMPT="").test_client()
    assert log_in(strict, "127.0.0.1").status_code == 200
    assert log_in(strict, "127.0.0.1").status_code == 429


def test_exempt_networks_are_never_limited(make_app):
    client = make_app(RATE_LIMIT_AUTH="1 per minute", RATE_LIMIT_EXEMPT="10.0.0.0/8").test_client()
    for _ in range(3):
        assert log_in(client, "10.1.2.3").status_code == 200
    assert log_in(client, "127.0.0.1").status_code == 200
    assert log_in(client, "127.0.0.1").status_code == 429  # loopback is no longer exempt


#: Addresses a client sent to pass for the host itself, in the security review.
EXEMPT_SPOOFS = ["127.0.0.1", "::ffff:127.0.0.1", "0:0:0:0:0:0:0:1", "127.255.1.2", "::1"]


def forwarded_log_in(client, forwarded_for: str, peer: str = "127.0.0.1"):
    return client.post(
        "/login",
        json={"username": "alice"},
        headers={"X-Forwarded-For": forwarded_for},
        environ_base={"REMOTE_ADDR": peer},
    )


@pytest.mark.parametrize("spoof", EXEMPT_SPOOFS)
def test_an_exempt_address_from_a_trusted_proxys_header_is_counted(make_app, spoof):
    client = make_app(
        RATE_LIMIT_AUTH="2 per minute", TRUSTED_PROXIES="127.0.0.1/32, ::1", OPEN_LOGIN="true"
    ).test_client()
    statuses = [forwarded_log_in(client, spoof).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    # the proxy's own requests, with no forwarded address, are still the host's: exempt
    assert all(log_in(client, "127.0.0.1").status_code == 200 for _ in range(3))


def test_values_that_are_no_address_share_the_proxys_counter(make_app):
    client = make_app(
        RATE_LIMIT_AUTH="2 per minute", TRUSTED_PROXIES="127.0.0.1/32", OPEN_LOGIN="true"
    ).test_client()
    statuses = [forwarded_log_in(client, f"nobody-{n}").status_code for n in range(3)]
    assert statuses == [200, 200, 429]  # counted as the proxy, each value no counter of its own
    assert forwarded_log_in(client, "203.0.113.70").status_code == 200  # a real client's own


def test_a_peer_that_is_no_address_gets_no_counter_of_its_own(make_app):
    client = make_app(RATE_LIMIT_AUTH="2 per minute").test_client()
    statuses = [log_in(client, f"socket-{n}").status_code for n in range(3)]
    assert statuses == [200, 200, 429]


def test_the_check_takes_the_forwarded_mark_outside_a_request(make_app):
    limiter = make_app(RATE_LIMIT_AUTH="1 per minute").extensions["rate_limiter"]
    assert [limiter.check("login", "127.0.0.1") for _ in range(2)] == [None, None]
    assert limiter.check("login", "127.0.0.1", forwarded=True) is None
    assert limiter.check("login", "127.0.0.1", forwarded=True) is not None


def test_rate_limit_off_never_refuses_and_keeps_no_counters(make_app, instance_path):
    client = make_app(RATE_LIMIT_AUTH="off").test_client()
    assert client.application.extensions["rate_limiter"] is None
    for _ in range(30):
        assert log_in(client).status_code == 200
    assert not (instance_path / SQLITE_FILE_NAME).exists()


def test_a_window_frees_when_it_ends(make_app):
    clock = ManualClock(time.time())
    client = make_app(RATE_LIMIT_AUTH="2 per second", clock=clock).test_client()
    storage = client.application.extensions["rate_limiter"].storage
    if hasattr(storage, "clock"):  # SQLite's windows follow the app's clock
        assert [log_in(client).status_code for _ in range(3)] == [200, 200, 429]
        clock.advance(1)  # the window has ended
        assert log_in(client).status_code == 200
        return
    # Redis keeps its own time: wait for it
    deadline = time.monotonic() + 20
    while True:  # two hits and a refusal within one window, however loaded the machine
        started = time.monotonic()
        answers = [log_in(client).status_code for _ in range(3)]
        if time.monotonic() - started < 0.8 or time.monotonic() > deadline:
            break
        time.sleep(1.1)
    assert answers == [200, 200, 429]
    time.sleep(1.1)
    assert log_in(client).status_code == 200


def test_the_longer_window_holds_when_the_shorter_has_room(make_app):
    client = make_app(RATE_LIMIT_AUTH="100 per second; 3 per minute").test_client()
    assert [log_in(client).status_code for _ in range(4)] == [200, 200, 200, 429]
    assert 1 <= int(log_in(client).headers["Retry-After"]) <= 60


def test_apps_sharing_a_store_share_the_counters(make_app):
    one, other = (make_app(RATE_LIMIT_AUTH="2 per minute").test_client() for _ in range(2))
    assert log_in(one).status_code == 200
    assert log_in(other).status_code == 200
    assert log_in(one).status_code == 429
    assert log_in(other).status_code == 429


def test_the_429_and_its_retry_after_match_the_openapi_document(make_app):
    client = make_app(RATE_LIMIT_AUTH="1 per minute").test_client()
    document = document_of(client)
    token = login(client)["refreshToken"]
    for method, path, call in [
        ("post", "/login", lambda: log_in(client)),
        ("post", "/token", lambda: refresh(client, token)),
        ("delete", "/token/{refreshToken}", lambda: revoke(client, "x" * 42)),
    ]:
        assert call().status_code in {200, 204}
        response = call()
        assert response.status_code == 429
        declared = assert_documented(document, method, path, response)
        assert declared["headers"]["Retry-After"]


def test_the_document_lists_the_429_only_when_limits_are_on(make_app):
    for setting, listed in [("3 per minute", True), ("off", False)]:
        document = document_of(make_app(RATE_LIMIT_AUTH=setting).test_client())
        for path, method in [("/login", "post"), ("/token", "post"), ("/token/{t}", "delete")]:
            path = path.replace("{t}", "{refreshToken}")
            assert ("429" in document["paths"][path][method]["responses"]) is listed


# --- when the counters' storage fails -------------------------------------------------


def counted_failures(client) -> list[None]:
    """Point the limiter's failure hook (what a metrics counter would be) at a list."""
    counted: list[None] = []
    client.application.extensions["rate_limiter"].on_storage_failure = lambda: counted.append(None)
    return counted


def limiter_messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "app.limits.address"]


@pytest.mark.store("sqlite")
def test_a_failing_sqlite_counter_file_lets_logins_through_logged_once_and_counted(
    make_app, instance_path, caplog
):
    clock = ManualClock()
    client = make_app(RATE_LIMIT_AUTH="1 per minute", clock=clock).test_client()
    failures = counted_failures(client)
    (instance_path / SQLITE_FILE_NAME).mkdir()  # opened on first use: it cannot be
    caplog.set_level(logging.WARNING)
    for _ in range(5):
        assert log_in(client).status_code == 200
    assert len(failures) == 5
    assert client.application.extensions["rate_limiter"].storage_failures == 5
    (message,) = limiter_messages(caplog)
    assert message.startswith(
        "rate limits not applied, their storage failed: SQLite "
        f"{instance_path / SQLITE_FILE_NAME}: OperationalError: unable to open database file"
    )
    # the storage is back: after one second without tries, the limits hold again
    (instance_path / SQLITE_FILE_NAME).rmdir()
    clock.advance(2)
    assert log_in(client).status_code == 200
    assert log_in(client).status_code == 429
    assert "rate limits applied again" in limiter_messages(caplog)[-1]
    assert "(4 more requests were unchecked" in limiter_messages(caplog)[-1]


@pytest.mark.store("sqlite")
def test_requests_let_through_unchecked_are_counted_in_the_metrics(make_app, instance_path):
    client = make_app(RATE_LIMIT_AUTH="1 per minute").test_client()
    (instance_path / SQLITE_FILE_NAME).mkdir()  # the counters cannot be opened
    for _ in range(3):
        assert log_in(client).status_code == 200
    metrics = client.get("/metrics").get_data(as_text=True)
    assert "token_service_rate_limit_errors_total 3.0" in metrics
    assert "token_service_rate_limited_total 0.0" in metrics


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


# --- real servers ---------------------------------------------------------------------

BURST, LIMIT = 40, 10
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
def test_the_limit_holds_across_the_workers_of_a_host(gunicorn_server, signing_secret, tmp_path):
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
    assert workers_holding(server, SQLITE_FILE_NAME) >= 2  # several workers counted
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
