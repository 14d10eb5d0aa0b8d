"""A real PostgreSQL for the tests: its own cluster in a temporary folder, a free loopback
port, its Unix socket in that folder, stopped by its PID.

Debian's server programs (``/usr/lib/postgresql/<version>/bin``: initdb, postgres) run as
the ``postgres`` user when the tests run as root (PostgreSQL refuses root), so the
cluster lives in a folder of its own under the system's temporary folder, which that
user may enter (pytest's ``tmp_path`` is root's alone). ``initdb`` runs once per test
process: each server starts from a copy of that template cluster.

Test settings: the session's server runs with ``fsync=off`` (and no full-page writes),
which only speeds the tests up: no test of it stops the machine. The servers of the
durability and fault tests keep PostgreSQL's defaults (``fsync=on``), so what a commit
promises is what they check.

Authentication: the service connects over TCP as the role ``tokens``, whose URL holds
``PASSWORD``. Its connections are trusted (a SCRAM exchange costs milliseconds of CPU on
both sides, for each of the thousands of connections the tests make); the role
``tokens_scram`` must give its password (SCRAM), for the tests of a refused password.
The fixtures' own connections are ``postgres``'s, on the Unix socket.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import glob
import grp
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.helpers.servers import free_port, wait_until

INSTALL_HINT = "apt-get install postgresql (its server programs: initdb, postgres)"
#: The service's role and its password (a test secret of this cluster only).
ROLE = "tokens"
#: The role that must give its password, which is PASSWORD too.
SCRAM_ROLE = "tokens_scram"
#: Who may connect how (pg_hba.conf).
HBA = f"""local all all trust
host all {SCRAM_ROLE} 127.0.0.1/32 scram-sha-256
host all all 127.0.0.1/32 trust
"""
PASSWORD = "s3cret-Pa55:word/with@signs"
QUOTED_PASSWORD = "s3cret-Pa55%3Aword%2Fwith%40signs"
#: Settings of the session's server: fast, for tests that never stop the machine.
FAST = ("fsync=off", "full_page_writes=off", "synchronous_commit=on")
#: Every server: small, loopback only, quiet.
COMMON = (
    "listen_addresses=127.0.0.1",
    "shared_buffers=16MB",
    "max_connections=200",
    "max_wal_senders=0",
    "wal_level=minimal",
    "autovacuum=off",
    "log_min_messages=warning",
    "log_min_error_statement=panic",
)


@functools.cache
def server_bin() -> Path | None:
    """Return the folder of Debian's PostgreSQL server programs (the newest), or None."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda path: int(Path(path).parent.parent.name),
    )
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(os.path.realpath(initdb)).parent if initdb else None


def postgres_available() -> bool:
    """Return whether the server programs are here (and, as root, the user to run them)."""
    folder = server_bin()
    if folder is None or not os.access(folder / "postgres", os.X_OK):
        return False
    try:
        return os.geteuid() != 0 or pwd.getpwnam("postgres") is not None
    except KeyError:  # the postgresql package makes that user
        return False


def _owner() -> tuple[int, int] | None:
    """Return the uid and gid to run the server as: ``postgres``'s when root, else None."""
    if os.geteuid() != 0:
        return None
    user = pwd.getpwnam("postgres")
    return user.pw_uid, grp.getgrgid(user.pw_gid).gr_gid


def _run_as_owner(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    owner = _owner()
    extra = {} if owner is None else {"user": owner[0], "group": owner[1], "extra_groups": []}
    return subprocess.run(command, check=True, capture_output=True, timeout=120, **extra, **kwargs)


def new_folder(prefix: str) -> Path:
    """Return a new folder under the system's temporary folder, the server user's own."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    owner = _owner()
    if owner is not None:
        os.chown(folder, *owner)
    return folder


@functools.cache
def template_cluster() -> Path:
    """Run initdb once per test process; return the cluster every server copies."""
    folder = new_folder("token-service-pg-template-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # when this test process ends
    bin_folder = server_bin()
    assert bin_folder is not None
    _run_as_owner(
        [
            str(bin_folder / "initdb"), "-D", str(folder / "data"), "-U", "postgres",
            "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync", "--no-instructions",
        ]
    )  # fmt: skip
    (folder / "data" / "pg_hba.conf").write_text(HBA)
    return folder / "data"


@dataclass
class PostgresServer:
    """One PostgreSQL server; ``settings`` (``name=value``) add to and override COMMON."""

    settings: tuple[str, ...] = ()
    port: int = field(default_factory=free_port)
    folder: Path = field(default_factory=lambda: new_folder("token-service-pg-"))
    process: subprocess.Popen[bytes] | None = None

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def log_path(self) -> Path:
        return self.folder / "postgres.log"

    def url(self, database: str = "tokens", *, password: str = QUOTED_PASSWORD) -> str:
        """Return the service's URL of ``database``: TCP, the role ``tokens``, its password."""
        return f"postgresql://{ROLE}:{password}@127.0.0.1:{self.port}/{database}"

    def admin(self, database: str = "postgres") -> psycopg.Connection[Any]:
        """Return a superuser connection over the Unix socket (autocommit)."""
        return psycopg.connect(
            host=str(self.folder), port=self.port, user="postgres", dbname=database,
            autocommit=True, connect_timeout=10,
        )  # fmt: skip

    def start(self, timeout: float = 30) -> PostgresServer:
        """Start (again, after a stop) on this server's port and folder; wait until it answers."""
        assert self.process is None, "already running"
        if not self.data.exists():
            shutil.copytree(template_cluster(), self.data, symlinks=True)
            owner = _owner()
            if owner is not None:
                for path in [self.data, *self.data.rglob("*")]:
                    os.lchown(path, *owner)
        bin_folder = server_bin()
        assert bin_folder is not None
        settings = [item for setting in (*COMMON, *self.settings) for item in ("-c", setting)]
        command = [
            str(bin_folder / "postgres"), "-D", str(self.data), "-p", str(self.port),
            "-k", str(self.folder), *settings,
        ]  # fmt: skip
        owner = _owner()
        extra = {} if owner is None else {"user": owner[0], "group": owner[1], "extra_groups": []}
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **extra
            )
        wait_until(self._ready, timeout, f"PostgreSQL on port {self.port}")
        return self

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            self.process = None
            raise RuntimeError(f"postgres exited: {self.log_path.read_text()[-2000:]}")
        try:
            with self.admin():
                return True
        except psycopg.OperationalError:  # not listening yet, or still starting
            return False

    def create_database(self, name: str = "tokens") -> str:
        """Create an empty database owned by the service's role (made once); return its URL."""
        with self.admin() as admin:
            if admin.execute("SELECT FROM pg_roles WHERE rolname = %s", (ROLE,)).fetchone() is None:
                for role in (ROLE, SCRAM_ROLE):
                    admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{PASSWORD}'")
                admin.execute(f"GRANT {ROLE} TO {SCRAM_ROLE}")  # the same rights
            admin.execute(f'CREATE DATABASE "{name}" OWNER {ROLE}')
        return self.url(name)

    def stop(self) -> None:
        """Stop it by its PID: SIGINT (a fast, clean shutdown), SIGKILL if it lingers."""
        if self.process is None:
            return
        self._signal_group(signal.SIGCONT)  # a frozen server could not act on the next one
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self._signal_group(signal.SIGKILL)
            self.process.wait(10)
        self.process = None

    def kill(self) -> None:
        """SIGKILL the server and every process of it: a crash, no shutdown, no last write.

        The postmaster is stopped first, so that it forks no backend between the listing
        of its children and their end: one left alive would hold the shared memory, and
        the next start would refuse it.
        """
        if self.process is not None:
            self.process.send_signal(signal.SIGSTOP)
            children = children_of(self.process.pid)
            for pid in children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.process.kill()
            self.process.wait(10)
            self.process = None
            wait_until(
                lambda: (
                    not any(Path(f"/proc/{pid}").exists() and _running(pid) for pid in children)
                ),
                10,
                "the killed backends' end",
            )

    def freeze(self) -> None:
        """SIGSTOP every process of the server: connections stay open, nothing answers."""
        self._signal_group(signal.SIGSTOP)

    def thaw(self) -> None:
        self._signal_group(signal.SIGCONT)

    def remove(self) -> None:
        """Stop it and remove its folder."""
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _signal_group(self, signal_number: int) -> None:
        """Signal the postmaster and each of its children (each is a session of its own)."""
        assert self.process is not None
        for pid in [self.process.pid, *children_of(self.process.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal_number)


def _running(pid: int) -> bool:
    """Return whether ``pid`` is a live process (not a zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def children_of(pid: int) -> list[int]:
    """Return the PIDs of ``pid``'s children, read from /proc."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[1]) == pid:
            children.append(int(stat.parent.name))
    return children
