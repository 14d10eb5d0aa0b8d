"""Real servers: free loopback ports, waiting for readiness, gunicorn, stopping by PID.

Each xdist worker runs its own: every port is picked by the kernel and every folder is
the test's own ``tmp_path``, so two workers never share a server.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.helpers.tools import ROOT

#: What every server inherits from this process's environment; nothing else (no settings).
INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")


def base_environment() -> dict[str, str]:
    """Return the environment a server starts from: none of the caller's settings."""
    return {name: os.environ[name] for name in INHERITED if name in os.environ}


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise TimeoutError(f"{what} not ready after {timeout} s")


def stop_process(process: subprocess.Popen, timeout: float = 10) -> None:
    """Stop a process by its PID: TERM, then KILL if it lingers."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)


def listening_socket(backlog: int = 128) -> socket.socket:
    """Return a socket listening on a port of 127.0.0.1 that the kernel picked.

    Handed to a server as an inherited descriptor, the port is never free for
    another process to take between choosing it and binding it.
    """
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(backlog)
    listener.set_inheritable(True)
    return listener


@dataclass
class Gunicorn:
    """A real gunicorn serving wsgi:app on a loopback port it inherits, already bound."""

    env: dict[str, str]
    workers: int
    log_path: Path
    listener: socket.socket = field(default_factory=listening_socket)
    process: subprocess.Popen | None = None

    @property
    def port(self) -> int:
        return self.listener.getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20) -> Gunicorn:
        descriptor = self.listener.fileno()
        command = [
            sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py",
            "-b", f"fd://{descriptor}", "-w", str(self.workers), "wsgi:app",
        ]  # fmt: skip
        self.log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            pass_fds=(descriptor,),
        )
        wait_until(self._ready, timeout, f"gunicorn on port {self.port}")
        return self

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"gunicorn exited: {self.log_path.read_text()[-2000:]}")
        try:
            return requests.get(f"{self.url}/healthz", timeout=3).status_code == 200
        except requests.RequestException:  # refused, or too slow on a loaded machine
            return False

    def worker_pids(self) -> list[int]:
        assert self.process is not None
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return [int(pid) for pid in children.read_text().split()]

    def replaced(self, killed: Collection[int], workers: int) -> bool:
        """Return whether ``workers`` workers run and none of the ``killed`` is among them:
        one reading, for two may straddle the master's reaping of one."""
        running = self.worker_pids()
        return len(running) == workers and not set(killed) & set(running)

    def stop(self) -> None:
        """Stop gunicorn and close the port, so that a client is refused, not left waiting."""
        if self.process is not None:
            stop_process(self.process)
            self.process = None
            self.log.close()
        self.listener.close()

    def kill(self) -> None:
        """Kill gunicorn and its workers at once, once its test is over and nothing of the
        server is read any more: a graceful stop waits on gunicorn's polling loops."""
        if self.process is not None:
            workers = []
            with contextlib.suppress(OSError):  # gone already: no workers to find
                workers = self.worker_pids()
            self.process.kill()
            for pid in workers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.process.wait(10)
            self.process = None
            self.log.close()
        self.listener.close()


def gunicorn_environment(
    folder: Path, store_url: str | None, env: dict[str, str] | None
) -> dict[str, str]:
    """Return the environment of a test's gunicorn: its instance in ``folder``, ``env`` on top."""
    base = {key: value for key, value in os.environ.items() if key in {"PATH", "HOME"}}
    base.update({"INSTANCE_PATH": str(folder / "instance"), "LOG_LEVEL": "WARNING"})
    if store_url is not None:
        base["TOKEN_STORE_URL"] = store_url
    base.update(env or {})
    return base


@pytest.fixture
def gunicorn_server(tmp_path: Path, store_backend: str | None) -> Iterator[Callable[..., Gunicorn]]:
    """Return a starter of real gunicorn servers; every one is stopped afterwards."""
    started: list[Gunicorn] = []

    def start(env: dict[str, str] | None = None, workers: int = 3, *, run: bool = True) -> Gunicorn:
        base = gunicorn_environment(tmp_path, store_backend, env)
        server = Gunicorn(base, workers, tmp_path / f"gunicorn-{len(started)}.log")
        started.append(server)
        return server.start() if run else server  # run=False: the port is known, start later

    yield start
    for server in started:
        server.kill()


@pytest.fixture(scope="module")
def shared_gunicorn(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., Gunicorn]]:
    """Return a starter of real gunicorn servers on SQLite that a module's tests share: one
    server for each settings and number of workers, stopped after the module.

    For tests that only send requests and read their answers, which any server of those
    settings gives them; a test that stops its server, reads its log or needs a store of
    its own takes ``gunicorn_server``.
    """
    folder = tmp_path_factory.mktemp("shared-gunicorn")
    started: dict[tuple[tuple[tuple[str, str], ...], int], Gunicorn] = {}

    def start(env: dict[str, str] | None = None, workers: int = 3) -> Gunicorn:
        key = (tuple(sorted((env or {}).items())), workers)
        if key not in started:
            own = folder / str(len(started))
            own.mkdir()
            base = gunicorn_environment(own, None, env)
            started[key] = Gunicorn(base, workers, own / "gunicorn.log").start()
        return started[key]

    yield start
    for server in started.values():
        server.kill()


def fresh(method: str, url: str, **kwargs: Any) -> requests.Response:
    """Send one request on a new connection, so gunicorn may pick any worker."""
    with requests.Session() as session:
        return session.request(method, url, timeout=15, **kwargs)
