"""The metrics of a real multi-worker gunicorn: a scrape adds up every worker's counts,
through worker deaths, restarts and reloads, and the metric files stay the live workers'."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import signal
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client.mmap_dict import MmapedDict

from app.observability.metric_files import KINDS, RESERVED_BYTES, worker_files
from app.observability.metrics import FLUSH_SECONDS
from app.observability.metrics_scrape import CONTENT_TYPE
from tests.helpers.metrics import REVOKE_RULE, parse, requests_of, value
from tests.helpers.servers import fresh, wait_until
from tests.helpers.tokens import bearer
from tests.helpers.tools import ROOT


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
    wait_until(lambda: server.replaced([victim], 2), 20, "gunicorn replacing the killed worker")
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
#: Without the merge, the first reload already leaves more files than the bound allows.
RELOADS = 4


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
    wait_until(lambda: server.replaced([victim], 2), 20, "gunicorn replacing the killed worker")
    server.stop()
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == {
        "counter_1.db": b"the operator's",
        f"gauge_livesum_{victim}.db": b"the operator's too",
    }


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


@pytest.mark.gunicorn
def test_gunicorn_answers_the_metrics_to_loopback_only_by_default(gunicorn_server):
    server = gunicorn_server(workers=1)
    assert fresh("GET", f"{server.url}/metrics").status_code == 200  # reached from loopback
    elsewhere = gunicorn_server({"METRICS_ALLOW": "10.0.0.0/8"}, workers=1)
    response = fresh("GET", f"{elsewhere.url}/metrics")
    assert response.status_code == 404
    assert response.json() == {"message": "not found"}
