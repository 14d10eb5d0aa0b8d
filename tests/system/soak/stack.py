"""The servers of a soak or reload run: gunicorn, nginx with the shipped site config, Redis.

Each runs on loopback ports of its own, in a folder of the run, and is stopped by its PID.
A gunicorn either inherits a socket this process holds (``fd://``), so that its port
keeps queueing connections while it restarts, as under systemd's socket activation, or
binds its port itself (``bound=True``), so that its port refuses connections while it
is down, as a plain ``gunicorn -b`` does.
"""

from __future__ import annotations

import os
import re
import shutil
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

from tests.helpers.servers import free_port, stop_process

ROOT = Path(__file__).resolve().parents[3]
SITE = ROOT / "deploy" / "nginx" / "token-service.conf"


def wait_for(check, timeout: float, what: str) -> None:
    """Call ``check`` until it is true, at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not ready after {timeout} s")
        time.sleep(0.05)


def answers(url: str) -> bool:
    """Return whether ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@dataclass
class Gunicorn:
    """The service under gunicorn, as ``make run`` starts it (gunicorn.conf.py)."""

    name: str
    env: dict[str, str]
    workers: int
    folder: Path
    #: True: gunicorn binds the port itself (closed while it is down); False: it inherits
    #: a socket this process holds, which keeps the port open across restarts.
    bound: bool = False
    port: int = 0
    listener: socket.socket | None = None
    process: subprocess.Popen | None = None
    starts: int = 0
    _log: IO[bytes] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.bound:
            self.port = self.port or free_port()
        else:
            self.listener = socket.socket()
            self.listener.bind(("127.0.0.1", 0))
            self.listener.listen(1024)
            self.listener.set_inheritable(True)
            self.port = self.listener.getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.folder / f"{self.name}.log"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, timeout: float = 60) -> Gunicorn:
        """Start gunicorn and wait until every worker has booted."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.listener is not None:
            bind, pass_fds = f"fd://{self.listener.fileno()}", (self.listener.fileno(),)
        else:
            bind, pass_fds = f"127.0.0.1:{self.port}", ()
        command = [
            sys.executable,
            "-m",
            "gunicorn",
            "-c",
            "gunicorn.conf.py",
            "-b",
            bind,
            "-w",
            str(self.workers),
            "wsgi:app",
        ]
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            pass_fds=pass_fds,
        )
        self.starts += 1
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60) -> None:
        def ready() -> bool:
            if self.process is None or self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited; its log:\n{self.log_tail()}")
            return len(self.worker_pids()) >= self.workers and answers(f"{self.url}/healthz")

        wait_for(ready, timeout, self.name)

    def worker_pids(self) -> list[int]:
        if self.process is None or self.process.poll() is not None:
            return []
        try:
            return children(self.pid)
        except OSError:
            return []

    def hup(self) -> None:
        """Reload gracefully: gunicorn starts new workers, then stops the old ones."""
        os.kill(self.pid, signal.SIGHUP)

    def stop(self) -> None:
        """Stop gunicorn gracefully (TERM), within its graceful_timeout and a margin."""
        if self.process is not None:
            stop_process(self.process, 30)
            self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def restart(self, env: dict[str, str] | None = None, timeout: float = 60) -> None:
        """Stop, then start again on the same port, with ``env`` if given."""
        self.stop()
        if env is not None:
            self.env = env
        self.start(timeout)

    def close(self) -> None:
        self.stop()
        if self.listener is not None:
            self.listener.close()

    def log_tail(self, size: int = 3000) -> str:
        try:
            return self.log_path.read_bytes()[-size:].decode("utf-8", "replace")
        except OSError:
            return ""


def nginx_binary() -> str | None:
    return shutil.which("nginx", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def site_config(
    listen_port: int, backend_ports: list[int], access_log: Path, server_options: str = ""
) -> str:
    """Return the shipped site config with these ports and log file, and nothing else changed.

    Several backends make one upstream of several servers, in the order given, each
    with ``server_options`` (``max_fails=0`` for several on one host, as documented).
    """
    text = SITE.read_text()
    options = f" {server_options}" if server_options else ""
    servers = "\n    ".join(
        f"server 127.0.0.1:{port}{options};   # gunicorn {number}"
        for number, port in enumerate(backend_ports, 1)
    )
    replacements = [
        ("listen 80 default_server;", f"listen 127.0.0.1:{listen_port} default_server;"),
        ("    listen [::]:80 default_server;\n", ""),  # 127.0.0.1 only
        ("/var/log/nginx/token-service.access.log", str(access_log)),
        ("server 127.0.0.1:8080;", "server 127.0.0.1:8080;"),  # counted here, replaced below
    ]
    for old, new in replacements:
        if text.count(old) != 1:
            raise RuntimeError(
                f"{SITE} no longer holds {old!r} once: update tests/system/soak/stack.py"
            )
        text = text.replace(old, new)
    # the server line goes whole, its comment included: each new line names its gunicorn
    line = re.compile(r"^[ \t]*server 127\.0\.0\.1:8080;.*$", re.M)
    return line.sub(lambda _: f"    {servers}", text)


@dataclass
class Nginx:
    """nginx running the shipped site config, in front of one or more gunicorns."""

    name: str
    backend_ports: list[int]
    folder: Path
    server_options: str = ""
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def access_log(self) -> Path:
        return self.folder / "access.log"

    @property
    def error_log(self) -> Path:
        return self.folder / "error.log"

    def start(self, timeout: float = 15) -> Nginx:
        binary = nginx_binary()
        if binary is None:
            raise RuntimeError("nginx is not installed: apt-get install nginx")
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "site.conf").write_text(
            site_config(self.port, self.backend_ports, self.access_log, self.server_options)
        )
        temp_paths = "\n".join(
            f"{kind}_temp_path {self.folder}/{kind};"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        (self.folder / "nginx.conf").write_text(
            f"daemon off;\nworker_processes 1;\npid {self.folder}/nginx.pid;\n"
            f"error_log {self.error_log} warn;\nevents {{ worker_connections 1024; }}\n"
            f"http {{\n{temp_paths}\naccess_log off;\ninclude {self.folder}/site.conf;\n}}\n"
        )
        command = [binary, "-p", str(self.folder), "-c", str(self.folder / "nginx.conf")]
        command += ["-e", str(self.error_log)]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

        def ready() -> bool:
            if self.process is None or self.process.poll() is not None:
                raise RuntimeError(f"nginx exited: {self.error_log.read_text()[-2000:]}")
            return answers(f"{self.url}/healthz")

        wait_for(ready, timeout, f"nginx {self.name}")
        return self

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, 10)
            self.process = None


@dataclass
class Redis:
    """A durable redis-server (appendonly, appendfsync always) on a port of its own."""

    folder: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 15) -> Redis:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.folder.mkdir(parents=True, exist_ok=True)
        command = [
            binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.folder),
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--maxmemory-policy",
            "noeviction",
            "--daemonize",
            "no",
            "--logfile",
            str(self.folder / "redis.log"),
        ]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        wait_for(self._ready, timeout, "redis-server")
        return self

    def _ready(self) -> bool:
        if self.process is None or self.process.poll() is not None:
            raise RuntimeError("redis-server exited: see its log in the run's folder")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as connection:
                connection.sendall(b"PING\r\n")
                return connection.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, 15)
            self.process = None


def children(pid: int) -> list[int]:
    """Return the PIDs of the live children of ``pid`` (Linux)."""
    listed = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(child) for child in listed.split()]
