"""A real redis-server for the tests: a free loopback port, its own --dir, stopped by its PID."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.helpers.servers import free_port, stop_process, wait_until

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
INSTALL_HINT = "apt-get install redis-server"
#: What the README asks of a production Redis: nothing evicted, every write on disk.
DURABLE = ("--appendonly", "yes", "--appendfsync", "always")


def redis_server_available() -> bool:
    return os.access(REDIS_SERVER, os.X_OK)


@dataclass
class RedisServer:
    """One redis-server process; ``options`` are added to (and override) the defaults."""

    directory: Path
    options: tuple[str, ...] = ()
    #: With a CA certificate, server certificate and key: TLS only, on ``port``.
    tls: tuple[Path, Path, Path] | None = None
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        if self.tls:
            return f"rediss://127.0.0.1:{self.port}/0?ssl_ca_certs={self.tls[0]}"
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return self.directory / "redis.log"

    def start(self, timeout: float = 15) -> RedisServer:
        """Start on this server's port and directory (again, after a stop) and wait for PING."""
        assert self.process is None, "already running"
        self.directory.mkdir(parents=True, exist_ok=True)
        ports = ["--port", str(self.port)]
        if self.tls:
            ca, cert, key = map(str, self.tls)
            ports = [
                "--port", "0", "--tls-port", str(self.port), "--tls-ca-cert-file", ca,
                "--tls-cert-file", cert, "--tls-key-file", key, "--tls-auth-clients", "no",
            ]  # fmt: skip
        command = [
            REDIS_SERVER, *ports, "--bind", "127.0.0.1",
            "--dir", str(self.directory), "--save", "", "--appendonly", "no",
            "--maxmemory-policy", "noeviction", "--daemonize", "no", "--logfile", "",
            *self.options,
        ]  # fmt: skip
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        wait_until(self._ready, timeout, f"redis-server on port {self.port}")
        return self

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            self.process = None
            raise RuntimeError(f"redis-server exited: {self.log_path.read_text()[-2000:]}")
        try:
            with self.client() as client:
                return bool(client.ping())
        except redis.RedisError:  # not listening yet, or still loading its data
            return False

    def client(self) -> redis.Redis:
        """Return a direct client, for the tests to look inside."""
        return redis.Redis.from_url(self.url, decode_responses=True, socket_timeout=5)

    def stop(self) -> None:
        """Stop it by its PID with SIGTERM (a clean shutdown), or SIGKILL if it lingers."""
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)  # a frozen server could not act on TERM
            stop_process(self.process)
            self.process = None

    def kill(self) -> None:
        """Kill it by its PID with SIGKILL: no shutdown, no last write."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None

    def freeze(self) -> None:
        """SIGSTOP: the port still accepts connections, nothing answers."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)
