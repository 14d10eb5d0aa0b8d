"""Prometheus metrics: every counter moves for its event, and a multi-worker gunicorn's
scrape adds up every worker's counts."""

from __future__ import annotations

import contextlib
import errno
import glob
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from flask import Request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString
from werkzeug.exceptions import TooManyRequests

from app.extensions import metrics_of
from app.observability import metrics_scrape
from app.observability.metric_files import KINDS, RESERVED_BYTES, scrape_lock, worker_files
from app.observability.metrics import FLUSH_SECONDS, RuleInEnvironRequest
from app.observability.metrics_scrape import (
    CONTENT_TYPE,
    OWNER_FILE,
    fresh_multiprocess_folder,
    merge_exited_workers,
    own_multiprocess_folder,
)
from tests.helpers.servers import fresh, wait_until
from tests.helpers.tokens import bearer, login, make_token, valid_claims
from tests.helpers.tools import ROOT

REVOKE_RULE = "/token/<any_text:refresh_token>"


def parse(text: str) -> dict[tuple, float]:
    """Return {(sample name, sorted labels): value} of a Prometheus text exposition."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(client) -> dict[tuple, float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["Content-Type"] == CONTENT_TYPE
    return parse(response.get_data(as_text=True))


def value(samples: dict[tuple, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def requests_of(samples, endpoint: str, method: str, status: int) -> float:
    return value(
        samples,
        "token_service_http_requests_total",
        endpoint=endpoint,
        method=method,
        status=str(status),
    )


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


def test_only_metrics_on_changes_flasks_request_class(make_app):
    assert make_app(METRICS="on").request_class is RuleInEnvironRequest
    assert make_app(METRICS="off").request_class is Request


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


# --- a real multi-worker gunicorn -----------------------------------------------------


def metric_files(server) -> Path:
    folders = glob.glob(str(Path(server.env["INSTANCE_PATH"]) / "metrics" / "*"))
    assert len(folders) == 1, folders
    return Path(folders[0])


def logins_per_worker(folder: Path) -> dict[int, float]:
    """Return, from each worker's own file, how many logins it answered 200."""
    counts = {}
    for kind, pid, path in worker_files(str(folder)):
        if kind != "counter":
            continue
        for key, count, _, _ in MmapedDict.read_all_values_from_file(str(path)):
            _, sample, labels = json.loads(key)[:3]
            if sample == "token_service_http_requests_total" and labels == {
                "endpoint": "/login",
                "method": "POST",
                "status": "200",
            }:
                counts[pid] = counts.get(pid, 0) + count
    return counts


def scrape_server(server) -> dict[tuple, float]:
    response = fresh("GET", f"{server.url}/metrics")
    assert response.status_code == 200
    assert response.headers["Content-Type"] == CONTENT_TYPE
    return parse(response.text)


@pytest.mark.gunicorn
def test_a_multi_worker_scrape_adds_up_every_workers_counts(gunicorn_server):
    server = gunicorn_server(workers=3)
    logins = 60

    def log_in_and_call(n: int) -> None:
        tokens = fresh("POST", f"{server.url}/login", json={"username": f"u{n}"}).json()
        assert fresh("GET", f"{server.url}/user-accessible").status_code == 401
        response = fresh(
            "GET", f"{server.url}/admin-accessible", headers=bearer(tokens["accessToken"])
        )
        assert response.status_code == 403
        body = {"username": f"u{n}", "refreshToken": tokens["refreshToken"]}
        assert fresh("POST", f"{server.url}/token", json=body).status_code == 200
        assert fresh("DELETE", f"{server.url}/token/{tokens['refreshToken']}").status_code == 204

    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(log_in_and_call, range(logins)))

    def totals_add_up() -> bool:
        samples = scrape_server(server)
        return (
            value(samples, "token_service_tokens_total", event="issued") == logins
            and value(samples, "token_service_tokens_total", event="refreshed") == logins
            and value(samples, "token_service_tokens_total", event="revoked") == logins
        )

    wait_until(totals_add_up, 5 * FLUSH_SECONDS + 10, "every worker's counts in the scrape")
    samples = scrape_server(server)
    assert value(samples, "token_service_tokens_total", event="refreshed") == logins
    assert value(samples, "token_service_auth_failures_total", reason="missing") == logins
    assert value(samples, "token_service_auth_failures_total", reason="wrong_role") == logins
    assert requests_of(samples, "/login", "POST", 200) == logins
    assert requests_of(samples, REVOKE_RULE, "DELETE", 204) == logins
    name = "token_service_http_request_duration_seconds_count"
    assert value(samples, name, endpoint="/login") == logins
    per_worker = logins_per_worker(metric_files(server))
    assert len([pid for pid, count in per_worker.items() if count]) >= 2, per_worker
    assert sum(per_worker.values()) == logins  # the scrape is the sum of the workers' files
    assert set(per_worker) <= set(server.worker_pids())


@pytest.mark.gunicorn
def test_a_dead_workers_counts_stay_in_the_totals(gunicorn_server):
    server = gunicorn_server(workers=2)
    for n in range(20):
        assert fresh("POST", f"{server.url}/login", json={"username": f"u{n}"}).ok
    folder = metric_files(server)
    wait_until(lambda: sum(logins_per_worker(folder).values()) == 20, 10, "flushed counts")
    victim = max(logins_per_worker(folder).items(), key=lambda item: item[1])[0]
    os.kill(victim, signal.SIGKILL)
    wait_until(
        lambda: len(server.worker_pids()) == 2 and victim not in server.worker_pids(),
        20,
        "gunicorn replacing the killed worker",
    )
    # merged by the master before it started the new worker
    assert victim not in {pid for _, pid, _ in worker_files(str(folder))}
    assert (folder / "counter_merged.db").exists()
    samples = scrape_server(server)
    assert value(samples, "token_service_tokens_total", event="issued") == 20


@pytest.mark.gunicorn
def test_a_restart_starts_from_clean_multiprocess_files(gunicorn_server):
    server = gunicorn_server(workers=2)
    for n in range(5):
        fresh("POST", f"{server.url}/login", json={"username": f"u{n}"})
    first_folder = metric_files(server)
    wait_until(
        lambda: value(scrape_server(server), "token_service_tokens_total", event="issued") == 5,
        10,
        "counts",
    )
    server.stop()
    assert not first_folder.exists()  # removed by the master on exit
    restarted = gunicorn_server(workers=2)
    assert metric_files(restarted) != first_folder
    samples = scrape_server(restarted)
    assert value(samples, "token_service_tokens_total", event="issued") == 0
    assert requests_of(samples, "/login", "POST", 200) == 0


@pytest.mark.gunicorn
def test_a_killed_masters_folder_is_removed_at_the_next_start(gunicorn_server):
    server = gunicorn_server(workers=1)
    folder = metric_files(server)
    pids = server.worker_pids()
    server.process.kill()  # SIGKILL: no on_exit hook runs
    server.process.wait(10)
    for pid in pids:
        wait_until(lambda pid=pid: not Path(f"/proc/{pid}").exists(), 10, "orphaned worker exit")
    assert folder.exists()
    server.process = None
    server.log.close()
    server.stop()
    restarted = gunicorn_server(workers=1)
    assert not folder.exists()
    assert metric_files(restarted).exists()


@pytest.mark.gunicorn
def test_metrics_off_under_gunicorn_is_a_404_and_no_files(gunicorn_server):
    server = gunicorn_server({"METRICS": "off"}, workers=2)
    assert fresh("GET", f"{server.url}/metrics").status_code == 404
    assert not (Path(server.env["INSTANCE_PATH"]) / "metrics").exists()


#: Reloads in the reload test: each replaces both workers, and a worker's files are 2 MiB.
RELOADS = 10


def worker_files_settled(server, folder: Path, old: set[int]) -> bool:
    """Return whether a reload is over: two new workers, each with its files, the old gone."""
    pids = set(server.worker_pids())
    return (
        len(pids) == 2
        and not pids & old
        and all((folder / f"{kind}_{pid}.db").exists() for pid in pids for kind in KINDS)
    )


class Scraper(threading.Thread):
    """Scrapes a server every 0.1 s until stopped; keeps each answer's status and count."""

    def __init__(self, server):
        super().__init__()
        self.server = server
        self.stopping = threading.Event()
        self.seen: list[tuple[int, float]] = []

    def run(self) -> None:
        for _ in range(3000):  # bounded, and stopped long before
            if self.stopping.wait(0.1):
                return
            response = fresh("GET", f"{self.server.url}/metrics")
            issued = 0.0
            if response.status_code == 200:
                issued = value(parse(response.text), "token_service_tokens_total", event="issued")
            self.seen.append((response.status_code, issued))


@pytest.mark.gunicorn
@pytest.mark.store("sqlite")  # the metric files, whatever the store
def test_reloads_keep_the_metric_files_to_the_live_workers_and_every_count(gunicorn_server):
    server = gunicorn_server(workers=2)
    folder = metric_files(server)
    logins = 0
    scraper = Scraper(server)
    scraper.start()
    try:
        for _ in range(RELOADS):
            for _ in range(3):
                response = fresh("POST", f"{server.url}/login", json={"username": f"u{logins}"})
                assert response.status_code == 200
                logins += 1
            old = set(server.worker_pids())
            server.process.send_signal(signal.SIGHUP)
            wait_until(lambda old=old: worker_files_settled(server, folder, old), 60, "a reload")
            # every count of the old workers is kept, though they are gone
            samples = scrape_server(server)
            assert value(samples, "token_service_tokens_total", event="issued") == logins

            def bounded() -> bool:
                return len(list(folder.glob("*.db"))) <= 2 * len(KINDS) + len(KINDS)

            with contextlib.suppress(TimeoutError):
                wait_until(bounded, 10, "the exited workers' files merged")
            names = sorted(path.name for path in folder.iterdir())
            # the live workers' files and one merged file a kind, whatever the reloads before
            assert bounded(), names
            size = sum(path.stat().st_blocks * 512 for path in folder.iterdir())
            assert size <= (2 + 1) * len(KINDS) * RESERVED_BYTES, (size, names)
    finally:
        scraper.stopping.set()
        scraper.join(30)
    # every login was answered by a worker that has exited since: its counts all merged
    samples = scrape_server(server)
    assert requests_of(samples, "/login", "POST", 200) == logins
    name = "token_service_http_request_duration_seconds"
    assert value(samples, f"{name}_count", endpoint="/login") == logins
    assert value(samples, f"{name}_bucket", endpoint="/login", le="+Inf") == logins
    # scrapes all through the reloads: every one answered, and the count never went back
    assert len(scraper.seen) >= RELOADS
    assert {status for status, _ in scraper.seen} == {200}
    counts = [issued for _, issued in scraper.seen]
    assert counts == sorted(counts)


@pytest.mark.gunicorn
@pytest.mark.store("sqlite")
@pytest.mark.parametrize("metrics", ["off", "on"])
def test_a_folder_the_operator_names_is_left_alone_with_its_files(
    gunicorn_server, tmp_path, metrics
):
    folder = tmp_path / "operators-folder"
    folder.mkdir()
    (folder / "counter_1.db").write_bytes(b"the operator's")
    server = gunicorn_server({"METRICS": metrics, "PROMETHEUS_MULTIPROC_DIR": str(folder)}, 2)
    victim = server.worker_pids()[0]
    # a file named as a dead worker's gauge would be, in the operator's folder
    (folder / f"gauge_livesum_{victim}.db").write_bytes(b"the operator's too")
    os.kill(victim, signal.SIGKILL)
    wait_until(
        lambda: len(server.worker_pids()) == 2 and victim not in server.worker_pids(),
        20,
        "gunicorn replacing the killed worker",
    )
    server.stop()
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == {
        "counter_1.db": b"the operator's",
        f"gauge_livesum_{victim}.db": b"the operator's too",
    }


# --- an exited worker's files, merged: in process -------------------------------------

#: A worker's counts: {label value: (count, [observations])}.
worker_counts = st.dictionaries(
    st.text(max_size=8),
    st.tuples(st.integers(0, 10**6), st.lists(st.integers(0, 3), max_size=4)),
    max_size=4,
)
BOUNDS = (1.0, 2.0, math.inf)


def write_worker_files(folder: Path, pid: int | str, counts: dict) -> None:
    """Write a worker's counter and histogram files as prometheus_client's value class
    does: one entry a sample, each bucket holding its own count (not cumulated)."""
    counter = MmapedDict(str(folder / f"counter_{pid}.db"))
    histogram = MmapedDict(str(folder / f"histogram_{pid}.db"))
    for label, (count, observations) in counts.items():
        counter.write_value(mmap_key("c", "c_total", ["l"], [label], "c help"), count, 0.0)
        lower = -math.inf
        for bound in BOUNDS:
            in_bucket = sum(1 for seen in observations if lower < seen <= bound)
            key = mmap_key("h", "h_bucket", ["l", "le"], [label, floatToGoString(bound)], "h help")
            lower = bound
            histogram.write_value(key, in_bucket, 0.0)
        key = mmap_key("h", "h_sum", ["l"], [label], "h help")
        histogram.write_value(key, sum(observations), 0.0)
    counter.close()
    histogram.close()


def collected(folder: Path) -> dict[tuple, float]:
    """Return what a scrape of ``folder`` shows: {(sample, labels): value}."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for metric in MultiProcessCollector(None, str(folder)).collect()
        for sample in metric.samples
    }


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    rounds=st.lists(
        st.dictionaries(st.integers(1, 40), st.tuples(worker_counts, st.booleans()), max_size=4),
        min_size=1,
        max_size=3,
    )
)
def test_merging_exited_workers_keeps_every_total_and_only_the_live_files(rounds):
    """Each round: workers (pid: counts, exited or not) write their files, then the master
    merges the exited ones; the scrape shows the same totals before and after."""
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        live: set[int] = set()
        for workers in rounds:
            for pid, (counts, _) in workers.items():
                if pid not in live:  # a live worker keeps its file (a new one, a new pid)
                    write_worker_files(folder, pid, counts)
            live = (live | set(workers)) - {pid for pid, (_, exited) in workers.items() if exited}
            before = collected(folder)
            merge_exited_workers(str(folder), live)
            assert collected(folder) == before
            expected = {f"{kind}_{pid}.db" for pid in live for kind in KINDS}
            kept = {path.name for path in folder.iterdir()} - {
                "counter_merged.db",
                "histogram_merged.db",
            }
            assert kept == expected


def test_a_merge_leaves_the_files_while_a_scrape_reads_them(tmp_path, monkeypatch, caplog):
    write_worker_files(tmp_path, 7, {"a": (3, [1])})
    before = collected(tmp_path)
    monkeypatch.setattr(metrics_scrape, "MERGE_WAIT_SECONDS", 0.2)
    with scrape_lock(str(tmp_path)):
        merge_exited_workers(str(tmp_path), live=())
        assert sorted(path.name for path in tmp_path.iterdir()) == [
            "counter_7.db",
            "histogram_7.db",
        ]
    assert "a scrape held" in caplog.text
    merge_exited_workers(str(tmp_path), live=())  # the next exit's merge takes them
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "counter_merged.db",
        "histogram_merged.db",
    ]
    assert collected(tmp_path) == before


def test_a_scrape_waits_for_a_merge_under_way(tmp_path):
    """A worker's scrape takes the folder's shared lock: while the master merges, it waits."""
    script = (
        "import threading\n"
        "from app.observability.metric_files import merge_lock\n"
        "from app.observability.metrics import Metrics\n"
        "metrics = Metrics()\n"
        "assert metrics.multiprocess\n"
        "done = threading.Event()\n"
        "with merge_lock(FOLDER, 5) as locked:\n"
        "    assert locked\n"
        "    threading.Thread(target=lambda: (metrics.exposition(), done.set())).start()\n"
        "    assert not done.wait(1), 'scraped during a merge'\n"
        "assert done.wait(20), 'the scrape never ended'\n"
    ).replace("FOLDER", repr(str(tmp_path)))
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_a_merge_that_fails_leaves_every_file_and_count(tmp_path, monkeypatch, caplog):
    write_worker_files(tmp_path, 7, {"a": (3, [1])})
    merge_exited_workers(str(tmp_path), live=())
    write_worker_files(tmp_path, 8, {"a": (2, [2])})
    before = collected(tmp_path)
    names = sorted(path.name for path in tmp_path.iterdir())

    def full_disk(descriptor: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full_disk)
    merge_exited_workers(str(tmp_path), live=())
    assert "not merged" in caplog.text
    assert "No space left on device" in caplog.text
    assert sorted(path.name for path in tmp_path.iterdir()) == names  # no partial file left
    assert collected(tmp_path) == before


def test_an_exited_workers_empty_file_is_removed(tmp_path):
    (tmp_path / "counter_9.db").touch()  # the worker died before it allocated its file
    merge_exited_workers(str(tmp_path), live=())
    assert [path.name for path in tmp_path.iterdir()] == ["counter_merged.db"]
    assert collected(tmp_path) == {}


@pytest.mark.parametrize(
    ("owner", "ours"), [(None, False), ("1", False), ("own pid", True), (b"\xff", False)]
)
def test_the_master_owns_only_a_folder_with_its_mark(tmp_path, monkeypatch, owner, ours):
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    if isinstance(owner, bytes):
        (tmp_path / OWNER_FILE).write_bytes(owner)
    elif owner is not None:
        (tmp_path / OWNER_FILE).write_text(str(os.getpid()) if owner == "own pid" else owner)
    assert own_multiprocess_folder() == (str(tmp_path) if ours else None)


def test_a_fresh_folder_is_marked_as_the_masters_own(tmp_path, monkeypatch):
    folder = fresh_multiprocess_folder(str(tmp_path))
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", folder)
    assert own_multiprocess_folder() == folder
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))  # its parent: not marked
    assert own_multiprocess_folder() is None


@pytest.mark.gunicorn
def test_metrics_script_checks_a_live_server(gunicorn_server):
    script = ROOT / "scripts" / "metrics.sh"

    def metrics_sh(url: str) -> subprocess.CompletedProcess:
        env = {"PATH": "/usr/bin:/bin", "BASE_URL": url}
        return subprocess.run(
            ["bash", str(script)], env=env, capture_output=True, text=True, timeout=60
        )

    server = gunicorn_server(workers=1)
    result = metrics_sh(server.url)
    assert result.returncode == 0, result.stderr
    assert "token_service_http_requests_total" in result.stdout
    off = gunicorn_server({"METRICS": "off"}, workers=1)
    result = metrics_sh(off.url)
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0  # one line
    assert "expected 200, got 404" in result.stderr
    url = server.url
    server.stop()
    result = metrics_sh(url)
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0
    assert "no answer from" in result.stderr


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


@pytest.mark.gunicorn
def test_gunicorn_answers_the_metrics_to_loopback_only_by_default(gunicorn_server):
    server = gunicorn_server(workers=1)
    assert fresh("GET", f"{server.url}/metrics").status_code == 200  # reached from loopback
    elsewhere = gunicorn_server({"METRICS_ALLOW": "10.0.0.0/8"}, workers=1)
    response = fresh("GET", f"{elsewhere.url}/metrics")
    assert response.status_code == 404
    assert response.json() == {"message": "not found"}
