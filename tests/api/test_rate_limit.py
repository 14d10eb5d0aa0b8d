"""RATE_LIMIT_AUTH: per-address limits on /login and /token, shared by every worker and host."""

from __future__ import annotations

import json
import logging
import time

import pytest

from app.backends.sqlite.counters import COUNTERS_FILE_NAME
from tests.helpers.clock import ManualClock
from tests.helpers.limits import CLIENT, counted_failures, from_address, limiter_messages, log_in
from tests.helpers.openapi import assert_documented, document_of
from tests.helpers.tokens import login

SOMEONE_ELSE = "198.51.100.9"


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


# --- the limit, in process -----------------------------------------------------------


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
    assert not (instance_path / COUNTERS_FILE_NAME).exists()


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


@pytest.mark.store("sqlite")
def test_a_failing_sqlite_counter_file_lets_logins_through_logged_once_and_counted(
    make_app, instance_path, caplog
):
    clock = ManualClock()
    client = make_app(RATE_LIMIT_AUTH="1 per minute", clock=clock).test_client()
    failures = counted_failures(client)
    (instance_path / COUNTERS_FILE_NAME).mkdir()  # opened on first use: it cannot be
    caplog.set_level(logging.WARNING)
    for _ in range(5):
        assert log_in(client).status_code == 200
    assert len(failures) == 5
    assert client.application.extensions["rate_limiter"].storage_failures == 5
    (message,) = limiter_messages(caplog)
    assert message.startswith(
        "rate limits not applied, their storage failed: SQLite "
        f"{instance_path / COUNTERS_FILE_NAME}: OperationalError: unable to open database file"
    )
    # the storage is back: after one second without tries, the limits hold again
    (instance_path / COUNTERS_FILE_NAME).rmdir()
    clock.advance(2)
    assert log_in(client).status_code == 200
    assert log_in(client).status_code == 429
    assert "rate limits applied again" in limiter_messages(caplog)[-1]
    assert "(4 more requests were unchecked" in limiter_messages(caplog)[-1]


@pytest.mark.store("sqlite")
def test_requests_let_through_unchecked_are_counted_in_the_metrics(make_app, instance_path):
    client = make_app(RATE_LIMIT_AUTH="1 per minute").test_client()
    (instance_path / COUNTERS_FILE_NAME).mkdir()  # the counters cannot be opened
    for _ in range(3):
        assert log_in(client).status_code == 200
    metrics = client.get("/metrics").get_data(as_text=True)
    assert "token_service_rate_limit_errors_total 3.0" in metrics
    assert "token_service_rate_limited_total 0.0" in metrics
