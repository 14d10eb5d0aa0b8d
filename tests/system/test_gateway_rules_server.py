"""ACCESS_RULES_FILE under a real gunicorn: the documented curl example, a start with a bad
file refused in one line, and a changed file picked up by every worker, with no restart
and across a HUP, while clients keep asking, with no failed request; a bad change is
logged and the rules in force stay."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from tests.helpers.docs import marked_block
from tests.helpers.servers import fresh, gunicorn_environment, wait_until
from tests.helpers.tools import ROOT, require_tool, which

PAGE = ROOT / "docs" / "gateway.md"

ADMIN_ONLY = '[[rules]]\npaths = ["/app/"]\nallow = "admin"\n'
USERS_TOO = '[[rules]]\npaths = ["/app/"]\nallow = "user"\n'
#: Bounds of the load: a few clients, each at most this many requests a second, for at most
#: this many seconds.
CLIENTS = 3
RATE = 30
LONGEST = 60


class Load:
    """Clients asking the check about /app/ with a user's token until stopped."""

    def __init__(self, url: str, token: str):
        self.url, self.token = url, token
        self.answers: list[tuple[float, int | str]] = []
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.client) for _ in range(CLIENTS)]

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(30)

    def client(self) -> None:
        headers = {
            "Authorization": f"Bearer {self.token}",
            "X-Original-Method": "GET",
            "X-Original-URI": "/app/items",
        }
        deadline = time.monotonic() + LONGEST
        with requests.Session() as session:
            while not self.stopping.is_set() and time.monotonic() < deadline:
                try:
                    status: int | str = session.get(
                        f"{self.url}/auth/check", headers=headers, timeout=10
                    ).status_code
                except requests.RequestException as error:
                    status = type(error).__name__
                self.answers.append((time.monotonic(), status))
                time.sleep(1 / RATE)

    def statuses_since(self, moment: float) -> set[int | str]:
        return {status for at, status in self.answers if at >= moment}


def replace(path, text: str) -> None:
    """Write the file whole, then rename it over the old one, as an editor or a deploy does."""
    temporary = path.with_suffix(".new")
    temporary.write_text(text)
    os.replace(temporary, path)


def ruled_server(gunicorn_server, signing_secret: str, rules: Path, workers: int):
    """Return a real gunicorn judging by ``rules``, trusting this host as its proxy."""
    return gunicorn_server(
        {
            "SIGNING_SECRET": signing_secret,
            "ACCESS_RULES_FILE": str(rules),
            "TRUSTED_PROXIES": "127.0.0.1/32",
            "OPEN_LOGIN": "true",
        },
        workers=workers,
    )


@pytest.mark.gunicorn
def test_the_documented_curl_example_answers_as_the_page_says(
    gunicorn_server, signing_secret, tmp_path
):
    require_tool(bool(which("curl") and which("jq")), "curl and jq", "apt-get install curl jq")
    page = PAGE.read_text()
    rules = tmp_path / "rules.toml"
    rules.write_text(page.split("## Access rules", 1)[1].split("```toml\n", 1)[1].split("```")[0])
    server = ruled_server(gunicorn_server, signing_secret, rules, workers=1)
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", marked_block(page, "gateway-rules")],
        env={"PATH": "/usr/bin:/bin", "BASE_URL": server.url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == ["403", "200", "403", "200"]


@pytest.mark.gunicorn
def test_a_start_with_a_bad_rules_file_is_refused_in_one_line(tmp_path, signing_secret):
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rules]]\nallow = "user"\n[[rules]]\npaths = ["/x"]\nallow = "admin"\n')
    env = gunicorn_environment(
        tmp_path, None, {"SIGNING_SECRET": signing_secret, "ACCESS_RULES_FILE": str(rules)}
    )
    finished = subprocess.run(
        [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "-b", "127.0.0.1:0",
         "wsgi:app"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert finished.returncode != 0
    assert finished.stderr.strip().splitlines()[-1] == (
        "configuration error: ACCESS_RULES_FILE rules[2]: never matches: rules[1] matches"
        " every request it would"
    )


@pytest.mark.gunicorn
def test_a_changed_file_is_read_again_with_no_failed_request(
    gunicorn_server, signing_secret, tmp_path
):
    rules = tmp_path / "rules.toml"
    rules.write_text(ADMIN_ONLY)
    server = ruled_server(gunicorn_server, signing_secret, rules, workers=2)
    login = fresh("POST", f"{server.url}/login", json={"username": "alice", "password": "x"})
    token = login.json()["accessToken"]
    with Load(server.url, token) as load:
        wait_until(lambda: len(load.answers) > 20, 20, "the first answers")
        assert load.statuses_since(0) == {403}

        replace(rules, USERS_TOO)  # read again by each worker within a second
        changed = time.monotonic()
        wait_until(lambda: load.statuses_since(changed + 2) != set(), 20, "answers after")
        assert load.statuses_since(changed + 1.5) == {200}

        replace(rules, '[[rules]]\nallow = "nobody"\n')  # a bad change: the rules stay
        bad = time.monotonic()
        time.sleep(2.5)
        assert load.statuses_since(bad) == {200}

        replace(rules, ADMIN_ONLY)
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGHUP)  # new workers read the file as a start does
        hup = time.monotonic()
        old_workers = set(server.worker_pids())
        wait_until(lambda: not old_workers & set(server.worker_pids()), 30, "the new workers")
        renewed = time.monotonic()
        time.sleep(1.5)
    assert load.statuses_since(renewed + 1.2) == {403}
    assert load.statuses_since(hup) <= {200, 403}  # no failed request through the HUP
    assert load.statuses_since(0) <= {200, 403}
    log = server.log_path.read_text()
    assert "ACCESS_RULES_FILE rules[1]: unknown verdict 'nobody'" in log
    assert "Traceback" not in log


@pytest.mark.gunicorn
def test_a_hup_with_a_bad_file_keeps_the_service_and_its_rules(
    gunicorn_server, signing_secret, tmp_path
):
    rules = tmp_path / "rules.toml"
    rules.write_text(ADMIN_ONLY)
    server = ruled_server(gunicorn_server, signing_secret, rules, workers=2)
    assert server.process is not None
    login = fresh("POST", f"{server.url}/login", json={"username": "alice", "password": "x"})
    token = login.json()["accessToken"]

    def hup() -> float:
        """Send a HUP; return when every worker is a new one."""
        assert server.process is not None
        old_workers = set(server.worker_pids())
        os.kill(server.process.pid, signal.SIGHUP)
        wait_until(
            lambda: server.worker_pids() and not old_workers & set(server.worker_pids()),
            30,
            "the new workers",
        )
        return time.monotonic()

    with Load(server.url, token) as load:
        wait_until(lambda: len(load.answers) > 20, 20, "the first answers")
        replace(rules, '[[rules]]\nallow = "nobody"\n')
        renewed = hup()
        time.sleep(1.5)
        assert server.process.poll() is None  # the master lives
        assert load.statuses_since(renewed) == {403}  # the new workers judge the old rules
        assert load.statuses_since(0) == {403}  # and no request failed

        worker = server.worker_pids()[0]
        os.kill(worker, signal.SIGKILL)  # the master forks another, on the bad file
        wait_until(
            lambda: server.replaced([worker], 2),
            30,
            "the worker in place of the killed one",
        )
        replaced = time.monotonic()
        time.sleep(1.5)
        assert server.process.poll() is None
        assert load.statuses_since(replaced) == {403}  # the new worker judges the old rules

        replace(rules, USERS_TOO)
        fixed = hup()
        time.sleep(1.5)
    assert load.statuses_since(fixed) == {200}
    # only the killed worker's requests may have failed
    assert load.statuses_since(0) <= {200, 403, "ConnectionError"}
    assert server.process.poll() is None
    log = server.log_path.read_text()
    problem = "ACCESS_RULES_FILE rules[1]: unknown verdict 'nobody' (public, user, admin or deny)"
    lines = [line for line in log.splitlines() if problem in line]
    assert lines
    assert all("ERROR" in line for line in lines)
    assert "Traceback" not in log
    assert "Worker failed to boot" not in log


@pytest.mark.gunicorn
def test_a_worker_started_on_a_bad_file_takes_the_newest_rules_its_master_read(
    gunicorn_server, signing_secret, tmp_path
):
    rules = tmp_path / "rules.toml"
    rules.write_text(ADMIN_ONLY)
    server = ruled_server(gunicorn_server, signing_secret, rules, workers=1)
    assert server.process is not None
    token = fresh("POST", f"{server.url}/login", json={"username": "alice"}).json()["accessToken"]
    headers = {
        "Authorization": f"Bearer {token}",
        "X-Original-Method": "GET",
        "X-Original-URI": "/app/items",
    }

    def restart_the_worker() -> None:
        (worker,) = server.worker_pids()
        os.kill(worker, signal.SIGKILL)
        wait_until(
            lambda: server.replaced([worker], 1),
            30,
            "the worker in place of the killed one",
        )
        wait_until(lambda: fresh("GET", f"{server.url}/healthz").status_code == 200, 30, "it")

    replace(rules, USERS_TOO)
    restart_the_worker()  # the master reads the file before it forks
    replace(rules, '[[rules]]\nallow = "nobody"\n')
    restart_the_worker()
    assert fresh("GET", f"{server.url}/auth/check", headers=headers).status_code == 200
    assert server.process.poll() is None
