"""A HUP after an edit of CONFIG_FILE: gunicorn.conf.py reads the settings again in the
master, and the workers build their apps from what the master checked, never from the
file themselves. A bad edit keeps the settings in force: the master neither stops nor
starts workers that cannot build the service."""

from __future__ import annotations

import os
import signal

import jwt
import requests

from tests.helpers.servers import Gunicorn, fresh, gunicorn_environment, wait_until

WORKERS = 2


def lifetime_of_a_login(server: Gunicorn) -> int:
    answer = fresh("POST", f"{server.url}/login", json={"username": "alice"})
    claims = jwt.decode(answer.json()["accessToken"], options={"verify_signature": False})
    return int(claims["exp"] - claims["iat"])


def hup_and_wait(server: Gunicorn) -> None:
    assert server.process is not None
    old = server.worker_pids()
    os.kill(server.process.pid, signal.SIGHUP)
    wait_until(lambda: server.replaced(old, WORKERS), 30, "the reload's new workers")


def test_a_bad_edit_keeps_the_settings_and_a_good_one_reaches_every_worker(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("ACCESS_TOKEN_LIFETIME = 120\n")
    env = gunicorn_environment(tmp_path, None, {"CONFIG_FILE": str(config), "LOG_LEVEL": "INFO"})
    server = Gunicorn(env, WORKERS, tmp_path / "gunicorn.log").start()
    try:
        assert lifetime_of_a_login(server) == 120
        config.write_text('ACCESS_TOKEN_LIFETIME = "two minutes"\n')  # a bad edit, then a HUP
        hup_and_wait(server)
        assert requests.get(f"{server.url}/healthz", timeout=5).status_code == 200
        assert {lifetime_of_a_login(server) for _ in range(6)} == {120}
        log = server.log_path.read_text()
        assert "configuration error, the settings in force are kept" in log
        config.write_text("ACCESS_TOKEN_LIFETIME = 300\n")  # fixed: the next HUP applies it
        hup_and_wait(server)
        assert {lifetime_of_a_login(server) for _ in range(6)} == {300}
    finally:
        server.stop()
