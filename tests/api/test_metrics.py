"""Prometheus metrics: every counter moves for its event, and who may read them.

A multi-worker gunicorn's scrape is tests/system/test_metrics_across_workers.py's; the
merge of an exited worker's files, tests/unit/test_metric_files.py's."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from werkzeug.exceptions import TooManyRequests

from app.compat.werkzeug import ServiceRequest
from app.extensions import metrics_of
from app.observability.metrics import RuleInEnvironRequest
from tests.helpers.metrics import REVOKE_RULE, parse, requests_of, scrape, value
from tests.helpers.tokens import bearer, login, make_token, valid_claims
from tests.helpers.tools import ROOT


def test_metrics_are_served_in_the_prometheus_text_format(client):
    samples = scrape(client)
    for event in ("issued", "refreshed", "revoked"):
        assert ("token_service_tokens_total", (("event", event),)) in samples
    for reason in ("missing", "malformed", "bad_signature", "expired", "wrong_role"):
        assert ("token_service_auth_failures_total", (("reason", reason),)) in samples
    assert ("token_service_store_errors_total", ()) in samples
    assert ("token_service_rate_limited_total", ()) in samples


def test_metrics_off_is_a_404(make_app):
    client = make_app(METRICS="off").test_client()
    response = client.get("/metrics")
    assert response.status_code == 404
    assert response.get_json() == {"message": "not found"}


def test_only_metrics_on_changes_the_services_request_class(make_app):
    assert make_app(METRICS="on").request_class is RuleInEnvironRequest
    assert issubclass(RuleInEnvironRequest, ServiceRequest)
    assert make_app(METRICS="off").request_class is ServiceRequest


def test_the_latency_histogram_adds_up_to_the_durations_observed(app):
    metrics = metrics_of(app)
    environ = {"REQUEST_METHOD": "GET"}
    for seconds in (0.0004, 0.001, 0.001, 0.3, 9.0):
        metrics.observe(environ, 200, seconds, {})
    samples = parse(metrics.exposition().decode())
    labels = {"endpoint": "unmatched"}
    name = "token_service_http_request_duration_seconds"
    assert value(samples, f"{name}_count", **labels) == 5
    assert value(samples, f"{name}_sum", **labels) == pytest.approx(9.3024)
    assert value(samples, f"{name}_bucket", le="0.0005", **labels) == 1
    assert value(samples, f"{name}_bucket", le="0.001", **labels) == 3  # a bound is inclusive
    assert value(samples, f"{name}_bucket", le="0.25", **labels) == 3
    assert value(samples, f"{name}_bucket", le="0.5", **labels) == 4
    assert value(samples, f"{name}_bucket", le="2.5", **labels) == 4
    assert value(samples, f"{name}_bucket", le="+Inf", **labels) == 5


@pytest.mark.parametrize("value_", ["0", "false", "no", "off", "OFF"])
def test_metrics_setting_accepts_the_usual_spellings_of_off(make_app, value_):
    assert make_app(METRICS=value_).test_client().get("/metrics").status_code == 404


def test_requests_are_counted_by_route_rule_method_and_status_never_the_raw_path(client):
    tokens = login(client)
    client.delete(f"/token/{tokens['refreshToken']}")
    client.delete("/token/a/b")
    client.get(f"/nope/{tokens['refreshToken']}")
    client.put("/login")
    client.open("/healthz", method="BREW")
    text = client.get("/metrics").get_data(as_text=True)
    assert tokens["refreshToken"] not in text
    assert "/nope" not in text
    samples = parse(text)
    assert requests_of(samples, "/login", "POST", 200) == 1
    assert requests_of(samples, REVOKE_RULE, "DELETE", 204) == 2
    assert requests_of(samples, "unmatched", "GET", 404) == 1
    assert requests_of(samples, "unmatched", "PUT", 405) == 1
    assert requests_of(samples, "unmatched", "other", 405) == 1


def test_latency_histogram_counts_each_request_in_its_bucket(client):
    for _ in range(3):
        client.get("/healthz")
    samples = scrape(client)
    name = "token_service_http_request_duration_seconds"
    assert value(samples, f"{name}_count", endpoint="/healthz") == 3
    assert value(samples, f"{name}_bucket", endpoint="/healthz", le="+Inf") == 3
    assert 0 < value(samples, f"{name}_sum", endpoint="/healthz") < 3
    buckets = [
        sample_value
        for (sample, labels), sample_value in samples.items()
        if sample == f"{name}_bucket" and dict(labels)["endpoint"] == "/healthz"
    ]
    assert buckets == sorted(buckets)  # cumulative


def moved(before, after, name, **labels) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def test_token_events_are_counted(client):
    before = scrape(client)
    tokens = login(client)
    body = {"username": "alice", "refreshToken": tokens["refreshToken"]}
    client.post("/token", json=body)
    client.post("/token", json=body)
    client.delete(f"/token/{tokens['refreshToken']}")
    client.delete(f"/token/{tokens['refreshToken']}")  # unknown now: nothing revoked
    after = scrape(client)
    assert moved(before, after, "token_service_tokens_total", event="issued") == 1
    assert moved(before, after, "token_service_tokens_total", event="refreshed") == 2
    assert moved(before, after, "token_service_tokens_total", event="revoked") == 1


@pytest.mark.parametrize(
    ("reason", "call"),
    [
        ("missing", lambda c, s, t: c.get("/user-accessible")),
        ("malformed", lambda c, s, t: c.get("/user-accessible", headers={"Authorization": "x"})),
        ("malformed", lambda c, s, t: c.get("/user-accessible", headers=bearer("a.b.c"))),
        (
            "bad_signature",
            lambda c, s, t: c.get(
                "/user-accessible", headers=bearer(make_token("k" * 40, valid_claims()))
            ),
        ),
        (
            "expired",
            lambda c, s, t: c.get(
                "/user-accessible",
                headers=bearer(make_token(s, valid_claims(exp=int(time.time()) - 1))),
            ),
        ),
        ("wrong_role", lambda c, s, t: c.get("/admin-accessible", headers=bearer(t))),
        (
            "unknown_refresh_token",
            lambda c, s, t: c.post("/token", json={"username": "a", "refreshToken": "x"}),
        ),
    ],
)
def test_each_authentication_failure_is_counted_by_reason(client, signing_secret, reason, call):
    token = login(client)["accessToken"]
    before = scrape(client)
    call(client, signing_secret, token)
    after = scrape(client)
    assert moved(before, after, "token_service_auth_failures_total", reason=reason) == 1
    total = sum(
        moved(before, after, "token_service_auth_failures_total", reason=other)
        for other in {dict(labels).get("reason") for (_, labels) in after} - {None}
    )
    assert total == 1  # and no other reason moved


def test_store_errors_are_counted(make_app, tmp_path):
    client = make_app(TOKEN_STORE_URL=f"sqlite:///{tmp_path}/dir.sqlite3").test_client()
    (tmp_path / "dir.sqlite3").mkdir()  # after start-up: the store cannot open it
    assert client.post("/login", json={"username": "a"}).status_code == 503
    assert client.get("/readyz").status_code == 503
    assert value(scrape(client), "token_service_store_errors_total") == 2


def test_requests_refused_by_a_rate_limit_are_counted(app):
    @app.get("/limited")
    def limited():
        raise TooManyRequests()

    client = app.test_client()
    assert client.get("/limited").status_code == 429
    samples = scrape(client)
    assert value(samples, "token_service_rate_limited_total") == 1
    assert requests_of(samples, "/limited", "GET", 429) == 1


@pytest.mark.processes
def test_importing_the_app_leaves_prometheus_client_unimported():
    # prometheus_client picks its multiprocess mode when first imported: gunicorn's master
    # imports the app package (for the settings) before it sets PROMETHEUS_MULTIPROC_DIR
    modules = "app.config.settings, app.observability.metrics, app.observability.metrics_scrape"
    code = f"import sys, {modules}; print('prometheus_client' in sys.modules)"
    env = {"PATH": os.environ["PATH"], "INSTANCE_PATH": os.environ["INSTANCE_PATH"]}
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.stdout.strip() == "False", result.stderr


# --- who may read the metrics (METRICS_ALLOW) ------------------------------------------


def from_address(address: str) -> dict:
    return {"environ_overrides": {"REMOTE_ADDR": address}}


def without_request_id(response) -> tuple:
    headers = sorted((k, v) for k, v in response.headers.items() if k != "X-Request-ID")
    return response.status_code, response.data, headers


@pytest.mark.parametrize("address", ["203.0.113.7", "10.1.2.3", "::2", "::ffff:10.0.0.1"])
def test_a_stranger_gets_the_404_of_a_path_that_does_not_exist(client, address):
    response = client.get("/metrics", **from_address(address))
    assert response.status_code == 404
    assert without_request_id(response) == without_request_id(
        client.get("/no-such-path", **from_address(address))
    )
    assert b"token_service" not in response.data


@pytest.mark.parametrize("address", ["127.0.0.1", "127.9.8.7", "::1", "::ffff:127.0.0.1"])
def test_the_host_itself_may_read_the_metrics_by_default(client, address):
    response = client.get("/metrics", **from_address(address))
    assert response.status_code == 200
    assert b"token_service_http_requests_total" in response.data


def test_metrics_allow_names_the_scrapers_networks(make_app):
    client = make_app(METRICS_ALLOW="10.0.0.0/8, 2001:db8::/32").test_client()
    assert client.get("/metrics", **from_address("10.1.2.3")).status_code == 200
    assert client.get("/metrics", **from_address("2001:db8::5")).status_code == 200
    assert client.get("/metrics", **from_address("127.0.0.1")).status_code == 404
    assert client.get("/metrics", **from_address("11.0.0.1")).status_code == 404


def test_an_empty_metrics_allow_answers_nobody(make_app):
    client = make_app(METRICS_ALLOW="").test_client()
    for address in ["127.0.0.1", "::1", "10.1.2.3"]:
        assert client.get("/metrics", **from_address(address)).status_code == 404


@pytest.mark.parametrize("value", ["10.0.0.0/33", "localhost", "10.0.0.1/8"])
def test_a_bad_metrics_allow_refuses_to_start(tmp_path, value):
    from app.config.parsers import ConfigError
    from app.config.settings import Settings

    with pytest.raises(ConfigError, match="METRICS_ALLOW must be comma-separated"):
        Settings.load({"METRICS_ALLOW": value, "INSTANCE_PATH": str(tmp_path)})
