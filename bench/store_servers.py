"""The stores of the bench's store matrix: a redis-server and a PostgreSQL of its own.

Each starts on a free loopback port in the run's temporary folder, is waited for, and
is stopped by its PID. Nothing that happens to run on the machine is used.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

#: What docs/operations.md asks of a production Redis: every write on disk before its reply.
REDIS_DURABLE = ("--appendonly", "yes", "--appendfsync", "always")
#: Where Debian's PostgreSQL puts initdb and pg_ctl, newest version first.
POSTGRES_BIN_GLOB = "/usr/lib/postgresql/*/bin"


@dataclass(frozen=True)
class StoreServer:
    """A running store server: its URL, and the PID of its main process."""

    url: str
    pid: int


def free_port() -> int:
    """Return a loopback port that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(ready: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``ready`` every 0.1 s until it holds; raise after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start in {timeout:.0f} s")
        time.sleep(0.1)


def stop_pid(process: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 20) -> None:
    """Stop ``process`` by its PID: ``sig``, then KILL if it lingers."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)


def redis_missing() -> str | None:
    """Return why the bench cannot start a redis-server here, or None."""
    if shutil.which("redis-server"):
        return None
    return "no redis-server (apt-get install redis-server)"


@contextlib.contextmanager
def redis_server(folder: Path) -> Iterator[StoreServer]:
    """Run a redis-server with AOF (``appendfsync always``) in ``folder``; yield it."""
    import redis  # the service's own dependency

    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    command = [
        "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
        "--save", "", *REDIS_DURABLE, "--maxmemory-policy", "noeviction",
        "--daemonize", "no", "--logfile", "",
    ]  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    with (folder / "redis.log").open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"redis-server exited: {(folder / 'redis.log').read_text()[-2000:]}")
        try:
            with redis.Redis.from_url(url, socket_timeout=2) as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    try:
        wait_until(ready, 20, f"redis-server on port {port}")
        yield StoreServer(url, process.pid)
    finally:
        stop_pid(process)


def postgres_bin() -> Path | None:
    """Return the folder of initdb and pg_ctl (Debian's newest, or on PATH), or None."""
    found = sorted(Path("/").glob(POSTGRES_BIN_GLOB.lstrip("/")), reverse=True)
    for folder in found:
        if (folder / "initdb").exists() and (folder / "pg_ctl").exists():
            return folder
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def postgres_missing() -> str | None:
    """Return why the bench cannot start a PostgreSQL here, or None."""
    if postgres_bin() is None:
        return "no initdb/pg_ctl (apt-get install postgresql)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root without a postgres user for initdb"
    return None


@contextlib.contextmanager
def postgres_server() -> Iterator[StoreServer]:
    """Run a PostgreSQL of its own in a new temporary folder (as ``postgres`` when root,
    which then owns the folder); yield it, and remove the folder after.

    Its durability is PostgreSQL's default (``fsync``, ``synchronous_commit`` on), the
    settings a service that promises committed logins runs with.
    """
    binaries = postgres_bin()
    assert binaries is not None
    user = None
    if os.geteuid() == 0:  # initdb refuses to run as root
        user = pwd.getpwnam("postgres")
    folder = Path(tempfile.mkdtemp(prefix="bench-postgres-"))  # a 0700 parent would bar it
    data, sockets = folder / "data", folder / "sockets"
    sockets.mkdir(exist_ok=True)
    if user is not None:
        for path in (folder, sockets):
            os.chown(path, user.pw_uid, user.pw_gid)
    port = free_port()

    def as_owner(*command: str) -> subprocess.CompletedProcess:
        preexec = None
        if user is not None:
            uid, gid = user.pw_uid, user.pw_gid

            def preexec() -> None:
                os.setgid(gid)
                os.setuid(uid)

        return subprocess.run(
            list(command), capture_output=True, text=True, timeout=120, check=False,
            preexec_fn=preexec, cwd=folder, env={**os.environ, "LC_ALL": "C"},
        )  # fmt: skip

    initdb = as_owner(
        str(binaries / "initdb"), "-D", str(data), "-U", "bench", "--auth=trust",
        "--no-instructions", "-E", "UTF8",
    )  # fmt: skip
    if initdb.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {initdb.stderr[-2000:]}")
    options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c max_connections=100"
    started = as_owner(
        str(binaries / "pg_ctl"), "-D", str(data), "-l", str(folder / "postgres.log"),
        "-o", options, "-w", "-t", "60", "start",
    )  # fmt: skip
    pid_file = data / "postmaster.pid"
    pid = int(pid_file.read_text().split()[0]) if pid_file.exists() else None
    try:
        if started.returncode != 0 or pid is None:
            raise RuntimeError(f"pg_ctl start failed: {started.stderr[-2000:]} {started.stdout}")
        yield StoreServer(f"postgresql://bench@127.0.0.1:{port}/postgres", pid)
    finally:
        if pid is not None:
            _stop_postmaster(pid)
        shutil.rmtree(folder, ignore_errors=True)


def _stop_postmaster(pid: int) -> None:
    """Stop PostgreSQL by its PID: SIGINT (a "fast" shutdown), then SIGKILL if it lingers."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat")
    try:
        return state.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
