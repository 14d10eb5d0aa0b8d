"""deploy/systemd/: the units verify offline, the service's sandbox scores "OK", and gunicorn
restarted on the socket systemd holds refuses and fails no request.

There is no systemd running as PID 1 here, so ``systemd-analyze verify`` reads the units
under a root folder of their own (the host's system units and a stub for the command),
and the real run is ``systemd-socket-activate``, which holds the port as the socket unit
does and hands it to gunicorn through LISTEN_FDS.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from tests.helpers.servers import base_environment, free_port, wait_until
from tests.helpers.tools import ROOT, require_tool, which
from tests.helpers.users import write_users

pytestmark = [pytest.mark.systemd, pytest.mark.gunicorn]

UNITS = ROOT / "deploy" / "systemd"
SERVICE = UNITS / "token-service.service"
SOCKET = UNITS / "token-service.socket"
CONFIG = UNITS / "config.toml"
#: docs/deployment.md, its lines joined: a quote may span two.
DEPLOYMENT = " ".join((ROOT / "docs" / "deployment.md").read_text().split())
#: The highest exposure systemd-analyze calls "OK".
MAX_EXPOSURE = 2.0
#: The bounded load of the restart test: clients, seconds, restarts of gunicorn within them.
CLIENTS = 2
LOAD_SECONDS = 10
RESTARTS = 2
PASSWORD = "correct horse battery"


def require_systemd_tools() -> None:
    require_tool(
        bool(which("systemd-analyze") and which("systemd-socket-activate")),
        "systemd-analyze and systemd-socket-activate",
        "apt-get install systemd",
    )


def unit_settings(path: Path) -> dict[str, list[str]]:
    """Return each key of a unit file with its values, in order (a key may repeat)."""
    settings: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            settings.setdefault(key, []).append(value)
    return settings


def verify(tmp_path: Path, *units: Path) -> subprocess.CompletedProcess[str]:
    """Run ``systemd-analyze verify`` on ``units`` installed under a root folder of their own."""
    root = tmp_path / "root"
    system = root / "etc" / "systemd" / "system"
    system.mkdir(parents=True, exist_ok=True)
    # the host's system units (sockets.target, multi-user.target...) the units refer to
    host_units = Path("/usr/lib/systemd/system")
    if not (root / "usr" / "lib" / "systemd" / "system").exists():
        shutil.copytree(host_units, root / "usr" / "lib" / "systemd" / "system", symlinks=True)
    for command in (*unit_settings(SERVICE)["ExecStart"], *unit_settings(SERVICE)["ExecReload"]):
        program = root / command.split()[0].lstrip("/")
        program.parent.mkdir(parents=True, exist_ok=True)
        program.write_text("#!/bin/sh\n")
        program.chmod(0o755)
    for unit in units:
        shutil.copy(unit, system / unit.name)
    names = [f"/etc/systemd/system/{unit.name}" for unit in units]
    return subprocess.run(
        ["systemd-analyze", "verify", "--man=no", f"--root={root}", *names],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_both_units_verify_without_a_warning(tmp_path):
    require_systemd_tools()
    result = verify(tmp_path, SOCKET, SERVICE)
    assert result.returncode == 0, result.stderr
    assert result.stdout + result.stderr == ""


def test_verify_reports_a_misspelled_key(tmp_path):
    require_systemd_tools()
    (tmp_path / "broken").mkdir()
    broken = tmp_path / "broken" / SOCKET.name
    broken.write_text(SOCKET.read_text().replace("Backlog=", "Backlogg="))
    result = verify(tmp_path, broken, SERVICE)
    assert "Unknown key 'Backlogg'" in result.stderr


def exposure(unit: Path) -> tuple[float, str]:
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", "--no-pager", str(unit)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    found = re.search(rf"Overall exposure level for {unit.name}: (\d+\.\d) (\w+)", result.stdout)
    assert found, result.stdout + result.stderr
    return float(found.group(1)), found.group(2)


def test_the_service_sandbox_scores_ok_as_the_docs_quote(tmp_path):
    require_systemd_tools()
    score, verdict = exposure(SERVICE)
    assert score <= MAX_EXPOSURE
    assert verdict == "OK"
    assert f'`systemd-analyze security` scores it {score} ("OK")' in DEPLOYMENT
    # without its sandbox, the same unit is exposed: the score measures the lines above
    bare = tmp_path / "token-service.service"
    bare.write_text(SERVICE.read_text().split("# The sandbox")[0])
    assert exposure(bare)[0] > 5


def test_the_units_agree_with_the_package_and_the_settings_file():
    service, socket_unit = unit_settings(SERVICE), unit_settings(SOCKET)
    config = tomllib.loads(CONFIG.read_text())
    assert socket_unit["ListenStream"] == [f"{config['HOST']}:{config['PORT']}"]
    assert service["ExecStart"] == ["/opt/token-service/bin/token-service serve"]
    assert service["Environment"] == ["CONFIG_FILE=/etc/token-service/config.toml"]
    assert service["EnvironmentFile"] == ["-/etc/token-service/env"]
    assert config["INSTANCE_PATH"] == "/var/lib/" + service["StateDirectory"][0]
    for key, value in {
        "User": "token-service",
        "ProtectSystem": "strict",
        "NoNewPrivileges": "yes",
        "CapabilityBoundingSet": "",
        "KillMode": "mixed",
        "Type": "notify",
    }.items():
        assert service[key] == [value], key
    assert "@system-service" in service["SystemCallFilter"]
    assert "token-service.socket" in service["Requires"][0]


# The service manager's part: hold the socket (systemd-socket-activate execs this script
# with it as descriptor 3), and start the service again each time it stops, each time
# with LISTEN_PID set to the new process, as systemd does; the command execs gunicorn.
SERVICE_MANAGER = r"""
stop_file=$1; pid_file=$2; shift 2
while [ ! -e "$stop_file" ]; do
    sh -c 'LISTEN_PID=$$; export LISTEN_PID; exec "$@"' service "$@" &
    echo $! > "$pid_file"
    wait $!
done
"""


# NoNewPrivileges= and MemoryDenyWriteExecute= as the kernel applies them (prctl; both are
# inherited by gunicorn's workers and kept across exec), then the command's own function.
# MemoryDenyWriteExecute= would stop a module that makes memory writable and executable.
SANDBOXED_SERVE = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
PR_SET_NO_NEW_PRIVS, PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN = 38, 65, 1
if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
    raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
if libc.prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0:
    if ctypes.get_errno() != errno.EINVAL:  # EINVAL: a kernel before 6.3, without it
        raise OSError(ctypes.get_errno(), "PR_SET_MDWE")
from app.serving.command import main
main()
"""


@dataclass
class SocketActivated:
    """gunicorn under systemd-socket-activate, restarted by SERVICE_MANAGER on the same socket."""

    folder: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        config = CONFIG.read_text()
        config = config.replace("/var/lib/token-service", str(self.folder / "instance"))
        (self.folder / "config.toml").write_text(config)
        (self.folder / "instance").mkdir(mode=0o700)
        write_users(self.folder / "instance" / "users.json", alice=PASSWORD)
        env = base_environment() | {
            # Environment= and what EnvironmentFile= would add, the signing secret
            "CONFIG_FILE": str(self.folder / "config.toml"),
            "SIGNING_SECRET": "kq3Vn8ZxT2wLr5Yb7Hc9Jd1Mf4Pg6Rs0Ut2Wv4Xy6Za8",
            "LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT),  # the package, as /opt/token-service has it installed
        }
        passed = [argument for name in env for argument in ("-E", name)]
        # the unit's ExecStart, /opt/token-service/bin/token-service serve: the same function,
        # under two of the unit's sandbox settings that the kernel applies to a process
        command = [sys.executable, "-c", SANDBOXED_SERVE, "serve"]
        self.log = (self.folder / "service.log").open("wb")
        self.process = subprocess.Popen(
            ["systemd-socket-activate", "-l", f"127.0.0.1:{self.port}", *passed,
             "sh", "-c", SERVICE_MANAGER, "manager", self.folder / "stop", self.folder / "pid",
             *command],
            cwd=self.folder, env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        wait_until(self.listening, 10, "systemd-socket-activate")
        # the first connection starts the service, as with systemd; it waits in the queue
        assert requests.get(f"{self.url}/healthz", timeout=60).status_code == 200

    def listening(self) -> bool:
        assert self.process is not None
        assert self.process.poll() is None, self.log_text()
        return f"127.0.0.1:{self.port}" in self.log_text()

    def log_text(self) -> str:
        return (self.folder / "service.log").read_text(errors="replace")

    def gunicorn_pid(self) -> int:
        return int((self.folder / "pid").read_text())

    def restart(self) -> float:
        """Stop gunicorn as systemd does (TERM to the master) and wait until it has exited; the
        manager then starts a new one. Return when the old one exited, once the new answers."""
        pid = self.gunicorn_pid()
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not Path(f"/proc/{pid}").exists() or zombie(pid), 30, "gunicorn's stop")
        stopped = time.monotonic()
        wait_until(lambda: self.gunicorn_pid() != pid, 10, "the next gunicorn")
        # as systemctl restart returns: once the new service is up
        assert requests.get(f"{self.url}/healthz", timeout=60).status_code == 200
        return stopped

    def stop(self) -> None:
        if self.process is None:
            return
        (self.folder / "stop").touch()
        try:
            os.kill(self.gunicorn_pid(), signal.SIGTERM)
            self.process.wait(30)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait(10)
        self.log.close()
        self.process = None


def zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except OSError:
        return True


@pytest.fixture
def activated(tmp_path: Path) -> Iterator[SocketActivated]:
    require_systemd_tools()
    service = SocketActivated(tmp_path)
    try:
        service.start()
        yield service
    finally:
        service.stop()


@dataclass
class Sent:
    started: float
    finished: float
    what: str
    outcome: str  # the status, or the exception's class


def client(url: str, number: int, deadline: float, sent: list[Sent]) -> None:
    for turn in range(100_000):  # bounded, and ended by the deadline long before
        if time.monotonic() > deadline:
            return
        started = time.monotonic()
        if turn % 4 == number:
            what, method, path, body = "login", "POST", "/login", {"username": "alice"}
            body["password"] = PASSWORD
        else:
            what, method, path, body = "healthz", "GET", "/healthz", None
        try:
            with requests.Session() as session:  # a connection of its own, as a new client
                answer = session.request(method, url + path, json=body, timeout=30)
            outcome = str(answer.status_code)
        except requests.RequestException as error:
            outcome = type(error).__name__
        sent.append(Sent(started, time.monotonic(), what, outcome))


def test_restarting_gunicorn_on_the_held_socket_refuses_and_fails_no_request(activated):
    sent: list[Sent] = []
    deadline = time.monotonic() + LOAD_SECONDS
    threads = [
        threading.Thread(target=client, args=(activated.url, number, deadline, sent))
        for number in range(CLIENTS)
    ]
    for thread in threads:
        thread.start()
    stopped_at = []
    try:
        for _ in range(RESTARTS):
            time.sleep(LOAD_SECONDS / (RESTARTS + 1))
            stopped_at.append(activated.restart())
    finally:
        for thread in threads:
            thread.join(LOAD_SECONDS + 60)
    failed = [item for item in sent if item.outcome != "200"]
    assert failed == [], (failed[:5], activated.log_text()[-3000:])
    assert {item.what for item in sent} == {"login", "healthz"}
    assert len(sent) >= 50, len(sent)
    # requests in flight when an old gunicorn had exited: the socket's queue kept them
    # until the next one answered
    waited = [item for item in sent for at in stopped_at if item.started <= at < item.finished]
    assert len(waited) >= RESTARTS, "no request met a restart"
    assert "Traceback" not in activated.log_text()
    # the master and its workers ran sandboxed
    master = activated.gunicorn_pid()
    workers = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    assert workers
    for pid in (master, *workers):
        assert "NoNewPrivs:\t1" in Path(f"/proc/{pid}/status").read_text()
