"""USERS_FILE under a running gunicorn: warned of once a start when it is unset, and read
again by every worker after ``flask users`` changes it, with no restart."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers.servers import fresh, wait_until
from tests.helpers.tools import ROOT
from tests.helpers.users import write_users

PASSWORD = "correct horse battery"


def warnings_about_users_file(server) -> list[str]:
    return [
        line for line in server.log_path.read_text().splitlines() if "USERS_FILE is not set" in line
    ]


@pytest.mark.gunicorn
def test_gunicorn_warns_once_per_start_without_a_directory(gunicorn_server, signing_secret):
    server = gunicorn_server({"SIGNING_SECRET": signing_secret}, workers=3)
    (line,) = warnings_about_users_file(server)
    assert json.loads(line)["level"] == "WARNING"


@pytest.mark.gunicorn
def test_a_running_gunicorn_reads_the_file_again_after_flask_users(
    gunicorn_server, signing_secret, tmp_path
):
    users_file = tmp_path / "users" / "users.json"
    users_file.parent.mkdir()
    write_users(users_file, alice=PASSWORD)
    env = {"SIGNING_SECRET": signing_secret, "USERS_FILE": str(users_file)}
    server = gunicorn_server(env, workers=2)
    assert warnings_about_users_file(server) == []

    def status(username: str, password: str) -> int:
        body = {"username": username, "password": password}
        return fresh("POST", f"{server.url}/login", json=body).status_code

    assert status("alice", PASSWORD) == 200
    assert status("bob", "bobs password") == 401
    flask = {
        "PATH": os.environ["PATH"],
        "USERS_FILE": str(users_file),
        "INSTANCE_PATH": str(tmp_path / "instance"),
        "FLASK_APP": "wsgi",
    }
    for args, stdin in [(["add", "bob"], "bobs password\n"), (["remove", "alice"], "")]:
        subprocess.run(
            [sys.executable, "-m", "flask", "users", *args],
            cwd=ROOT,
            env=flask,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    # every worker, on a new connection each time: within about a second, no restart
    wait_until(lambda: all(status("bob", "bobs password") == 200 for _ in range(4)), 10, "bob")
    wait_until(lambda: all(status("alice", PASSWORD) == 401 for _ in range(4)), 10, "alice gone")
