"""Settings: defaults, validation at start, and the generated signing secret."""

from __future__ import annotations

import multiprocessing
import os
import stat
import subprocess
import sys

import pytest

from app import create_app
from app.config import ConfigError, Settings, load_or_create_secret
from tests.conftest import ROOT, login


def test_defaults():
    settings = Settings.from_env()
    assert settings.admin_username == "admin"
    assert settings.access_token_lifetime == 60
    assert settings.port == 8080
    assert settings.trusted_proxy_hops == 0
    assert settings.signing_secret is None
    assert settings.token_store_url is None or "TOKEN_STORE_URL" in os.environ
    assert settings.auth_cookie_name == "jwt"


def test_environment_is_read(monkeypatch):
    monkeypatch.setenv("PORT", "9090")
    monkeypatch.setenv("ADMIN_USERNAME", "root")
    monkeypatch.setenv("ACCESS_TOKEN_LIFETIME", "300")
    settings = Settings.from_env()
    assert (settings.port, settings.admin_username, settings.access_token_lifetime) == (
        9090,
        "root",
        300,
    )


def test_overrides_win_over_the_environment(monkeypatch):
    monkeypatch.setenv("PORT", "9090")
    assert Settings.from_env({"PORT": "9191"}).port == 9191


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("SIGNING_SECRET", "short", "SIGNING_SECRET must be at least 32 bytes"),
        ("SIGNING_SECRET", "", "SIGNING_SECRET must be at least 32 bytes"),
        ("SIGNING_SECRET", "x" * 31, "SIGNING_SECRET must be at least 32 bytes"),
        ("ACCESS_TOKEN_LIFETIME", "0", "ACCESS_TOKEN_LIFETIME must be between 1 and 86400"),
        ("ACCESS_TOKEN_LIFETIME", "-5", "ACCESS_TOKEN_LIFETIME must be between"),
        ("ACCESS_TOKEN_LIFETIME", "1m", "ACCESS_TOKEN_LIFETIME must be a whole number"),
        ("PORT", "0", "PORT must be between 1 and 65535"),
        ("PORT", "http", "PORT must be a whole number"),
        ("PORT", "70000", "PORT must be between"),
        ("ADMIN_USERNAME", "", "ADMIN_USERNAME must not be empty"),
        ("TRUSTED_PROXY_HOPS", "-1", "TRUSTED_PROXY_HOPS must be between 0 and 10"),
        ("TOKEN_STORE_URL", "mysql://x", "TOKEN_STORE_URL must start with"),
        ("TOKEN_STORE_URL", "sqlite:///:memory:", "TOKEN_STORE_URL needs a file path"),
        ("TOKEN_STORE_URL", "redis://127.0.0.1:notaport/0", "not a usable Redis URL"),
        ("TOKEN_STORE_URL", "redis://127.0.0.1:6379/x", "not a usable Redis URL"),
        ("TOKEN_STORE_TIMEOUT", "nan", "TOKEN_STORE_TIMEOUT must be between"),
        ("TOKEN_STORE_TIMEOUT", "soon", "TOKEN_STORE_TIMEOUT must be a number of seconds"),
        ("LOG_LEVEL", "LOUD", "LOG_LEVEL must be one of"),
        ("AUTH_COOKIE_SECURE", "maybe", "AUTH_COOKIE_SECURE must be true or false"),
        ("AUTH_COOKIE_NAME", "a b", "AUTH_COOKIE_NAME must be a cookie name"),
        ("INSTANCE_PATH", "", "INSTANCE_PATH must not be empty"),
        ("WEB_CONCURRENCY", "0", "WEB_CONCURRENCY must be between 1 and 64"),
    ],
)
def test_bad_value_refuses_to_start_with_a_clear_message(name, value, message):
    with pytest.raises(ConfigError, match=message):
        Settings.from_env({name: value})


def test_unknown_override_is_refused():
    with pytest.raises(ConfigError, match="unknown settings: SIGNING_SECRETS"):
        Settings.from_env({"SIGNING_SECRETS": "x" * 40})


def test_signing_secret_of_32_bytes_is_enough():
    assert Settings.from_env({"SIGNING_SECRET": "x" * 32}).signing_secret == "x" * 32


def test_missing_secret_is_generated_once_and_kept_private(tmp_path):
    app = create_app({"INSTANCE_PATH": str(tmp_path)})
    secret_file = tmp_path / "signing_secret"
    secret = app.config["SETTINGS"].signing_secret
    assert len(secret.encode()) >= 32
    assert secret_file.read_text().strip() == secret
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    again = create_app({"INSTANCE_PATH": str(tmp_path)})
    assert again.config["SETTINGS"].signing_secret == secret
    assert [path.name for path in tmp_path.iterdir() if path.name.endswith(".tmp")] == []


def test_tokens_survive_a_new_app_on_the_same_instance_folder(tmp_path):
    first = create_app({"INSTANCE_PATH": str(tmp_path)}).test_client()
    tokens = login(first, "alice")
    second = create_app({"INSTANCE_PATH": str(tmp_path)}).test_client()
    headers = {"Authorization": f"Bearer {tokens['accessToken']}"}
    assert second.get("/user-accessible", headers=headers).status_code == 200
    fields = {"username": "alice", "refreshToken": tokens["refreshToken"]}
    assert second.post("/token", json=fields).status_code == 200


def test_short_generated_secret_on_disk_refuses_to_start(tmp_path):
    (tmp_path / "signing_secret").write_text("short\n")
    with pytest.raises(ConfigError, match="must be at least 32 bytes"):
        create_app({"INSTANCE_PATH": str(tmp_path)})


def _generate(path: str, queue) -> None:
    queue.put(load_or_create_secret(path))


def test_processes_starting_together_agree_on_one_secret(tmp_path):
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    processes = [context.Process(target=_generate, args=(str(tmp_path), queue)) for _ in range(12)]
    for process in processes:
        process.start()
    secrets_seen = {queue.get(timeout=20) for _ in processes}
    for process in processes:
        process.join(20)
    assert len(secrets_seen) == 1
    assert (tmp_path / "signing_secret").read_text().strip() == secrets_seen.pop()


def test_gunicorn_config_refuses_a_bad_setting_before_starting():
    env = {"PATH": os.environ["PATH"], "SIGNING_SECRET": "too-short"}
    command = [sys.executable, "-c", "import runpy; runpy.run_path('gunicorn.conf.py')"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert "configuration error: SIGNING_SECRET must be at least 32 bytes" in result.stderr
    assert "Traceback" not in result.stderr


def test_gunicorn_config_binds_the_port_setting():
    env = {"PATH": os.environ["PATH"], "PORT": "9123", "WEB_CONCURRENCY": "3"}
    code = "import runpy; c = runpy.run_path('gunicorn.conf.py'); print(c['bind'], c['workers'])"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30
    )
    assert result.stdout.strip() == "['0.0.0.0:9123'] 3"


@pytest.mark.parametrize(
    ("in_ci", "outcome"), [(False, pytest.skip.Exception), (True, pytest.fail.Exception)]
)
def test_a_missing_server_program_skips_on_a_laptop_and_fails_in_ci(monkeypatch, in_ci, outcome):
    import tests.conftest

    monkeypatch.setattr(tests.conftest, "IN_CI", in_ci)
    with pytest.raises(outcome, match="install it with: apt-get install nginx"):
        tests.conftest.require_tool(False, "nginx", "apt-get install nginx")
    tests.conftest.require_tool(True, "nginx", "apt-get install nginx")  # present: no effect
