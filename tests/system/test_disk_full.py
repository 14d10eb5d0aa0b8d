"""A full disk under the SQLite store: logins wait for space; nothing else stops or is lost.

The whole instance folder (the store's file, the rate limits' counters beside it and the
metrics' files) lives on a small tmpfs that the test mounts itself, as root (CI runs as
root), and fills with a filler file until writing fails. What must hold is in
docs/operations.md, "A full disk".
"""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from app.auth.tokens import issue_cookie_token
from app.auth.users import HASHER
from app.backends.sqlite.counters import COUNTERS_FILE_NAME
from app.observability.metric_files import RESERVED_BYTES, reserve_metric_files
from tests.helpers.clock import ManualClock
from tests.helpers.servers import fresh, wait_until
from tests.helpers.tokens import bearer
from tests.helpers.tools import IN_CI

pytestmark = [pytest.mark.disk, pytest.mark.store("sqlite")]

#: The tmpfs: the store, its counters and two workers' metric files fit with room to spare.
DISK_SIZE = "8m"
#: Logins on the full disk before one must have been refused: SQLite may still write
#: into a page its files hold already.
MAX_LOGINS_TO_FULL = 50
STORE_FILE = "refresh_tokens.sqlite3"
UNAVAILABLE = {"message": "token store is unavailable, try again shortly"}
FULL = "database or disk is full (SQLITE_FULL)"
PASSWORD = "correct horse battery"
ALICE = {"source": "local", "id": "alice", "shownName": "Alice Example"}


@dataclass
class SmallDisk:
    """A tmpfs mounted on ``path``: ``fill`` takes every byte left, ``free`` gives them back."""

    path: Path

    @property
    def filler(self) -> Path:
        return self.path / "filler"

    def fill(self) -> int:
        """Write the filler until the disk refuses one byte more; return its size."""
        descriptor = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for block in (bytes(1 << 16), bytes(4096), b"\0"):  # the last bytes, finer
                for _ in range(1 << 16):  # bounded: more than any block fits on the disk
                    try:
                        os.write(descriptor, block)
                    except OSError as error:
                        if error.errno != errno.ENOSPC:
                            raise
                        break
        finally:
            os.close(descriptor)
        return self.filler.stat().st_size

    def free(self) -> None:
        self.filler.unlink()


def cannot_mount(reason: str) -> None:
    """Fail in CI, which runs as root and must run these tests; skip elsewhere, saying why."""
    message = f"cannot mount a tmpfs to fill: {reason}"
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    """Mount a tmpfs of DISK_SIZE on a folder of the test's own; unmount it afterwards.

    Ask for it before any server that uses it, so that the server stops first.
    """
    if os.geteuid() != 0:
        cannot_mount("mounting needs root (CI runs as root)")
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    options = f"size={DISK_SIZE},mode=0700"
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "token-service-test", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        cannot_mount(mounted.stderr.strip() or f"mount exited with {mounted.returncode}")
    try:
        yield SmallDisk(mount_point)
    finally:
        if subprocess.run(["umount", str(mount_point)], check=False).returncode != 0:
            # a file still open: detach it now, the kernel frees it when the file closes
            subprocess.run(["umount", "--lazy", str(mount_point)], check=True)


def integrity(path: Path) -> str:
    """Return SQLite's verdict on the file at ``path``, opened read-only."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return connection.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        connection.close()


# --- a real gunicorn ------------------------------------------------------------------


class Client:
    """The requests of the gunicorn test, each on a new connection (any worker answers)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def log_in(self, username: str) -> requests.Response:
        return fresh("POST", f"{self.url}/login", json={"username": username, "password": "pw"})

    def refresh(self, username: str, token: str) -> int:
        body = {"username": username, "refreshToken": token}
        return fresh("POST", f"{self.url}/token", json=body).status_code

    def revoke(self, token: str) -> requests.Response:
        return fresh("DELETE", f"{self.url}/token/{token}")

    def get(self, path: str, **kwargs) -> requests.Response:
        return fresh("GET", f"{self.url}{path}", **kwargs)


def booted_workers(server, instance: Path) -> list[int]:
    """Return the pids of the workers that have built their app (made their metric files)."""
    folder = instance / "metrics" / str(server.process.pid)
    return [pid for pid in server.worker_pids() if (folder / f"counter_{pid}.db").exists()]


def log_records(server) -> list[dict]:
    """Return gunicorn's log, the request log's lines included, as written so far."""
    written = server.log_path.read_text().split("\n")[:-1]  # the last: cut, or being written
    return [json.loads(line) for line in written if line.startswith("{")]


def log_messages(server) -> list[str]:
    return [record.get("message", "") for record in log_records(server)]


def errors(server) -> list[str]:
    """Return the ERROR lines of the log but gunicorn's word on the worker the test killed."""
    return [
        f"{record['message']} {record.get('traceback', '')}"
        for record in log_records(server)
        if record["level"] == "ERROR" and "was sent SIGKILL" not in record["message"]
    ]


@pytest.mark.gunicorn
def test_on_a_full_disk_only_writes_wait_and_no_token_is_lost(
    small_disk, gunicorn_server, signing_secret, signing_key
):
    instance = small_disk.path / "instance"
    server = gunicorn_server(
        {
            "SIGNING_SECRET": signing_secret,
            "INSTANCE_PATH": str(instance),
            # counted, never reached: every request writes its counters on the full disk
            "RATE_LIMIT_AUTH": "1000 per second",
            "RATE_LIMIT_EXEMPT": "192.0.2.0/24",  # not loopback, where the test calls from
        },
        workers=2,
    )
    client = Client(server.url)
    wait_until(lambda: len(booted_workers(server, instance)) == 2, 20, "both workers")
    master, workers = server.process.pid, sorted(server.worker_pids())
    metric_file = instance / "metrics" / str(master) / f"histogram_{workers[0]}.db"
    assert metric_file.stat().st_blocks * 512 >= RESERVED_BYTES  # allocated, not sparse
    acknowledged: dict[str, str] = {}  # every refresh token a 200 handed out: its user
    for n in range(4):
        response = client.log_in(f"user{n}")
        assert response.status_code == 200
        acknowledged[response.json()["refreshToken"]] = f"user{n}"
    access = client.log_in("admin").json()["accessToken"]
    cookie = {"jwt": issue_cookie_token(ALICE, signing_key.ring, 900)}

    assert small_disk.fill() > 0
    for n in range(MAX_LOGINS_TO_FULL):
        response = client.log_in(f"late{n}")
        if response.status_code != 200:
            break
        acknowledged[response.json()["refreshToken"]] = f"late{n}"
    assert response.status_code == 503
    assert response.json() == UNAVAILABLE
    assert response.headers["Retry-After"] == "1"
    assert [client.log_in("again").status_code for _ in range(3)] == [503] * 3
    messages = log_messages(server)
    assert f"refresh-token store unavailable: SQLite store {instance / STORE_FILE}: {FULL}" in (
        messages
    )
    # the request rate limit fails open: its counters' file is on the same full disk
    counters = instance / COUNTERS_FILE_NAME
    assert (
        "rate limits not applied, their storage failed: SQLite"
        f" {counters}: OperationalError: {FULL}" in messages
    )

    # what only reads keeps working: refreshes, the protected resources, the cookie
    for token, username in acknowledged.items():
        assert client.refresh(username, token) == 200
    assert client.get("/admin-accessible", headers=bearer(access)).status_code == 200
    guests = fresh(
        "POST", f"{server.url}/restaurant-reservation", json={"guestsCount": 2},
        headers=bearer(access),
    )  # fmt: skip
    assert guests.status_code == 200
    assert client.get("/api/v1/me", cookies=cookie).json() == ALICE
    assert client.get("/readyz").status_code == 200  # the store answers; writes wait
    # a revoke writes: 204 only once the token is gone, else 503 and the token still works
    revoked = next(iter(acknowledged))
    revoke = client.revoke(revoked)
    assert revoke.status_code in (204, 503)
    assert client.refresh(acknowledged[revoked], revoked) == (
        401 if revoke.status_code == 204 else 200
    )
    assert client.revoke("x" * 42).status_code == 204  # an unknown token: nothing to write
    logout = fresh("POST", f"{server.url}/auth/logout", cookies=cookie)
    assert logout.status_code == 503  # the deny list cannot grow: the cookie is kept
    assert client.get("/api/v1/me", cookies=cookie).status_code == 200

    # each scrape writes its worker's counts into its metric files, on the full disk
    assert [client.get("/metrics").status_code for _ in range(4)] == [200] * 4
    # a worker that starts on the full disk serves too (its metrics stay in its memory)
    os.kill(workers[0], signal.SIGKILL)

    def new_workers() -> list[int]:
        return [pid for pid in server.worker_pids() if pid not in workers]

    wait_until(lambda: bool(new_workers()), 20, "a new worker")
    os.kill(workers[1], signal.SIGSTOP)  # only the new worker takes connections now
    try:
        assert client.get("/healthz").status_code == 200
        assert client.refresh("user0", next(iter(acknowledged))) == 200
    finally:
        os.kill(workers[1], signal.SIGCONT)
    assert "metrics: this worker's files cannot be allocated" in " ".join(log_messages(server))
    assert errors(server) == []

    small_disk.free()
    response = client.log_in("after")  # no restart
    assert response.status_code == 200
    acknowledged[response.json()["refreshToken"]] = "after"
    assert client.revoke(revoked).status_code == 204
    del acknowledged[revoked]
    assert client.refresh("user0", revoked) == 401
    for token, username in acknowledged.items():
        assert client.refresh(username, token) == 200
    assert fresh("POST", f"{server.url}/auth/logout", cookies=cookie).status_code == 204
    assert client.get("/api/v1/me", cookies=cookie).status_code == 401
    assert server.process.poll() is None
    assert server.process.pid == master
    survivors = sorted(server.worker_pids())
    assert len(survivors) == 2
    assert workers[1] in survivors  # the worker not killed never died
    assert integrity(instance / STORE_FILE) == "ok"
    assert integrity(counters) == "ok"
    assert errors(server) == []
    assert not any("SIGBUS" in message for message in log_messages(server))


# --- in one process: the settings that change what a full disk does ------------------


@pytest.fixture
def disk_app(small_disk, make_app):
    """Return a factory of apps whose instance folder is on the small disk; closed after."""
    made = []

    def make(**settings):
        app = make_app(INSTANCE_PATH=str(small_disk.path / "instance"), **settings)
        made.append(app)
        return app

    yield make
    for app in made:  # every file closed, so that the disk unmounts
        app.extensions["token_store"].close()
        for name in ("rate_limiter", "login_failure_limit"):
            if app.extensions.get(name) is not None:
                app.extensions[name].storage.close()


def test_with_rotation_a_refresh_waits_for_space_and_its_token_stays_valid(small_disk, disk_app):
    client = disk_app(REFRESH_TOKEN_ROTATION="true").test_client()
    tokens = client.post("/login", json={"username": "alice"}).get_json()
    body = {"username": "alice", "refreshToken": tokens["refreshToken"]}
    small_disk.fill()
    for _ in range(3):  # a rotation writes: refused, and not taken for the token's reuse
        response = client.post("/token", json=body)
        assert response.status_code == 503
        assert response.get_json() == UNAVAILABLE
    assert client.get("/user-accessible", headers=bearer(tokens["accessToken"])).status_code == 200
    small_disk.free()
    response = client.post("/token", json=body)
    assert response.status_code == 200
    successor = response.get_json()["refreshToken"]
    assert client.post("/token", json={**body, "refreshToken": successor}).status_code == 200
    assert integrity(small_disk.path / "instance" / STORE_FILE) == "ok"


def test_the_login_failure_limit_fails_closed_on_a_full_disk(small_disk, disk_app, caplog):
    users = small_disk.path / "users.json"
    users.write_text(json.dumps({"alice": HASHER.hash(PASSWORD)}))
    clock = ManualClock()
    app = disk_app(USERS_FILE=str(users), clock=clock)
    client = app.test_client()
    login = {"username": "alice", "password": PASSWORD}
    assert client.post("/login", json=login).status_code == 200
    small_disk.fill()
    caplog.set_level(logging.WARNING)
    response = client.post("/login", json=login)  # the right password, and refused
    assert response.status_code == 503
    assert response.get_json() == {"message": "login is unavailable, try again shortly"}
    (message,) = [r.getMessage() for r in caplog.records if r.name.startswith("app.limits")]
    assert message.startswith("logins refused (503), the login failure limit's storage failed")
    assert FULL in message
    small_disk.free()
    clock.advance(2)  # past the second in which the storage is not tried again
    assert client.post("/login", json=login).status_code == 200
    assert integrity(small_disk.path / "instance" / COUNTERS_FILE_NAME) == "ok"


def test_metric_files_that_the_disk_cannot_allocate_are_not_left_behind(small_disk):
    folder = small_disk.path / "metrics"
    folder.mkdir()
    reserve_metric_files(str(folder), 1)
    for kind in ("counter", "histogram"):
        assert (folder / f"{kind}_1.db").stat().st_blocks * 512 >= RESERVED_BYTES
    small_disk.fill()
    with pytest.raises(OSError, match="No space left") as raised:
        reserve_metric_files(str(folder), 2)
    assert raised.value.errno == errno.ENOSPC
    assert sorted(path.name for path in folder.iterdir()) == ["counter_1.db", "histogram_1.db"]
    reserve_metric_files(str(folder), 1)  # allocated already: nothing more to give
