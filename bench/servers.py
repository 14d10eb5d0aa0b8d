"""Gunicorn servers of the benchmark: started on loopback, watched through /proc, stopped by PID."""

from __future__ import annotations

import collections
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from bench import procstat

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
#: The worker settings that the floor and the peers copy from the service's gunicorn.conf.py.
WORKER_SETTINGS = {
    "workers": "--workers",
    "worker_class": "--worker-class",
    "threads": "--threads",
    "worker_connections": "--worker-connections",
    "keepalive": "--keep-alive",
    "timeout": "--timeout",
    "graceful_timeout": "--graceful-timeout",
    "max_requests": "--max-requests",
    "max_requests_jitter": "--max-requests-jitter",
}
#: What every server inherits from the bench's environment; nothing else (no settings).
INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")


def base_environment() -> dict[str, str]:
    """Return the environment a server starts from: none of the caller's settings."""
    return {name: os.environ[name] for name in INHERITED if name in os.environ}


def service_gunicorn_settings(env: dict[str, str]) -> dict[str, str]:
    """Return gunicorn's fully resolved settings for the service (``--print-config``)."""
    completed = subprocess.run(
        [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "--print-config", "wsgi:app"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if completed.returncode != 0:
        raise RuntimeError(f"gunicorn --print-config failed:\n{completed.stderr[-2000:]}")
    return parse_print_config(completed.stdout)


def parse_print_config(output: str) -> dict[str, str]:
    """Read ``name = value`` lines of ``gunicorn --print-config``."""
    return dict(re.findall(r"^(\w+)\s+= ?(.*)$", output, re.M))


def worker_arguments(settings: dict[str, str]) -> list[str]:
    """Return the gunicorn options that give another app the service's worker settings."""
    arguments = []
    for name, option in WORKER_SETTINGS.items():
        if name in settings:
            arguments += [option, settings[name]]
    return arguments


@dataclass
class Server:
    """A gunicorn on a loopback port it inherits already bound, so no other process takes it."""

    name: str
    arguments: list[str]  # after ``python -m gunicorn``, before ``-b``
    application: str
    cwd: Path
    env: dict[str, str]
    log_path: Path
    listener: socket.socket = field(default_factory=lambda: _listening_socket())
    process: subprocess.Popen | None = None
    _log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> Server:
        descriptor = self.listener.fileno()
        command = [sys.executable, "-m", "gunicorn", *self.arguments]
        command += ["-b", f"fd://{descriptor}", self.application]
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            command, cwd=self.cwd, env=self.env, stdout=self._log, stderr=subprocess.STDOUT,
            pass_fds=(descriptor,),
        )  # fmt: skip
        return self

    def wait_ready(self, workers: int, timeout: float = 60) -> None:
        """Wait until every worker has booted and the server sits idle."""
        deadline = time.monotonic() + timeout
        while not self._answers():
            self._check_deadline(deadline, "answer HTTP")
            time.sleep(0.1)
        while len(self.worker_pids()) < workers:
            self._check_deadline(deadline, f"run {workers} workers")
            time.sleep(0.1)
        # workers booting after the first one still import the app: wait for quiet
        last = self.cpu_seconds()
        while True:
            time.sleep(0.3)
            now = self.cpu_seconds()
            if now - last < 0.02:
                return
            self._check_deadline(deadline, "settle")
            last = now

    def _answers(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited; its log:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=5):
                return True
        except urllib.error.HTTPError:
            return True  # any HTTP answer (the floor and the peers have no /healthz)
        except OSError:
            return False

    def _check_deadline(self, deadline: float, what: str) -> None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{self.name} did not {what} in time; its log:\n{self.log_tail()}")

    def log_tail(self, size: int = 3000) -> str:
        try:
            return self.log_path.read_bytes()[-size:].decode("utf-8", "replace")
        except OSError:
            return ""

    def log_warnings(self, limit: int = 10) -> list[str]:
        """Return the last warnings and errors of the server's log (no access-log lines)."""
        marks = ("[WARNING]", "[ERROR]", "[CRITICAL]", "WARNING in", "ERROR in", "Traceback")
        found: collections.deque[str] = collections.deque(maxlen=limit)
        try:
            with self.log_path.open(encoding="utf-8", errors="replace") as log:
                found.extend(line.rstrip("\n") for line in log if any(m in line for m in marks))
        except OSError:
            pass
        return list(found)

    def worker_pids(self) -> list[int]:
        return procstat.children(self.pid)

    def cpu_seconds(self) -> float:
        """Return the CPU seconds of the master and its workers so far."""
        return procstat.tree_cpu_seconds(self.pid)

    def stop(self, timeout: float = 20) -> None:
        """Stop gunicorn by its PID: TERM, then KILL if it lingers; close its port."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        if self._log is not None:
            self._log.close()
        self.listener.close()


def _listening_socket() -> socket.socket:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(2048)
    listener.set_inheritable(True)
    return listener


def service(env: dict[str, str], log_path: Path) -> Server:
    """Return the service as ``make run`` starts it, on a loopback port of its own."""
    return Server("service", ["-c", "gunicorn.conf.py"], "wsgi:app", ROOT, env, log_path)


def plain_app(
    name: str, application: str, settings: dict[str, str], env: dict[str, str], log_path: Path
) -> Server:
    """Return a bench app under the service's worker settings and gunicorn's standard logging."""
    # cwd is bench/, which has no gunicorn.conf.py for gunicorn to pick up by default
    arguments = [*worker_arguments(settings), "--access-logfile", "-", "--no-control-socket"]
    return Server(name, arguments, application, BENCH, env, log_path)


def stop_all(servers: list[Server]) -> None:
    """Stop every server, TERM first to all, so they wind down together."""
    for server in servers:
        if server.process is not None and server.process.poll() is None:
            server.process.send_signal(signal.SIGTERM)
    for server in servers:
        server.stop()


def service_environment(instance_path: Path) -> dict[str, str]:
    """Return the service's environment: its defaults, but for what a bench run must change."""
    return {
        **base_environment(),
        "INSTANCE_PATH": str(instance_path),  # a store and a secret of the run's own
        "ACCESS_TOKEN_LIFETIME": "86400",  # longer than any run (the largest value allowed)
        "RATE_LIMIT_AUTH": "off",  # the bench floods /login and /token from one address
    }


def service_secret(instance_path: Path) -> str:
    """Return the signing secret the service generated in its instance folder."""
    from app.config.settings import SECRET_FILE_NAME

    return (instance_path / SECRET_FILE_NAME).read_text().strip()


def init_peer_database(module: str, env: dict[str, str]) -> None:
    """Create a peer's SQLite file with its own ``flask init-db`` command."""
    completed = subprocess.run(
        [sys.executable, "-m", "flask", "--app", module, "init-db"],
        cwd=BENCH, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if completed.returncode != 0:
        raise RuntimeError(f"flask --app {module} init-db failed:\n{completed.stderr[-2000:]}")
