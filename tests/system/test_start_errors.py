"""gunicorn's start on a port that another program holds: one line naming PORT, at once."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.observability.metrics_scrape import MULTIPROCESS_FOLDER
from tests.helpers.servers import Gunicorn, base_environment, listening_socket
from tests.helpers.tools import ROOT

pytestmark = [pytest.mark.gunicorn, pytest.mark.store("sqlite")]

#: gunicorn's own first line, before any hook runs.
BANNER = "Starting gunicorn"


def start(folder: Path, env: dict[str, str], *arguments: str, **options):
    command = [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", *arguments, "wsgi:app"]
    env = base_environment() | {"INSTANCE_PATH": str(folder / "instance"), **env}
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, **options
    )


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_port_in_use_is_one_line_naming_port_at_once(tmp_path, log_format):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        result = start(tmp_path, {"PORT": str(port), "LOG_FORMAT": log_format})
        took = time.monotonic() - started
    assert result.returncode == 1
    lines = [line for line in (result.stdout + result.stderr).splitlines() if BANNER not in line]
    assert lines == [
        f"configuration error: PORT {port} is in use on 127.0.0.1 by another program"
        " (another `make run`?): stop it, or set PORT to a free port"
    ]
    # gunicorn alone retried for 5 s; what is left is the interpreter's start
    assert took < 4, took
    assert not (tmp_path / "instance" / MULTIPROCESS_FOLDER).exists()  # stopped before it


def test_a_stale_listen_fds_of_another_process_still_gets_the_one_line(tmp_path):
    """LISTEN_FDS counts only with LISTEN_PID naming gunicorn itself, as gunicorn reads them:
    a pair inherited from a parent process names another one."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = start(tmp_path, {"PORT": str(port), "LISTEN_FDS": "1", "LISTEN_PID": "1"})
    assert result.returncode == 1
    assert f"configuration error: PORT {port} is in use" in result.stderr + result.stdout


def test_a_port_shared_on_purpose_with_reuse_port_starts(tmp_path):
    with socket.socket() as sharing:
        sharing.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sharing.bind(("127.0.0.1", 0))
        sharing.listen()
        env = base_environment() | {
            "INSTANCE_PATH": str(tmp_path / "instance"),
            "PORT": str(sharing.getsockname()[1]),
            "GUNICORN_CMD_ARGS": "--reuse-port --workers 1",
        }
        log = tmp_path / "gunicorn.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "wsgi:app"],
                cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + 20
            while "Booting worker" not in log.read_text() and process.poll() is None:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
            assert process.poll() is None, log.read_text()
            assert "in use" not in log.read_text()
        finally:
            process.kill()
            process.wait()


def test_a_handed_over_socket_is_not_checked_against_port(tmp_path):
    """A bind given to gunicorn (here a descriptor, as systemd hands one over) is used as
    is, whatever PORT says: the check is for the address gunicorn binds itself."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env = base_environment() | {
            "INSTANCE_PATH": str(tmp_path / "instance"),
            "PORT": str(taken.getsockname()[1]),
        }
        server = Gunicorn(env, 1, tmp_path / "gunicorn.log", listening_socket())
        try:
            server.start()  # raises if gunicorn exited
        finally:
            server.kill()
