"""`pip install .` gives a `token-service` command that works from any folder: the operator
commands, and `token-service serve` with the service's gunicorn settings.

The wheel is built and installed offline: setuptools from the development set, no build
isolation, and the dependencies seen through the development virtualenv's site-packages.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import requests

from tests.helpers.servers import base_environment, free_port, stop_process, wait_until
from tests.helpers.tools import ROOT

pytestmark = pytest.mark.gunicorn


def source_copy(destination: Path) -> Path:
    """Copy the files git knows of (tracked, or new and not ignored) to ``destination``:
    a build in the tree itself would leave build/ and *.egg-info there."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout.decode()  # fmt: skip
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():  # a file deleted but not yet committed is listed too
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, destination / name)
    return destination


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return a virtualenv with the project's wheel installed, and nothing of the repository
    on its path."""
    folder = tmp_path_factory.mktemp("package")
    source = source_copy(folder / "source")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
         "--no-deps", "--no-build-isolation", "--no-index", "--wheel-dir", folder / "dist",
         source],
        check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = (folder / "dist").glob("token_service-*.whl")
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    site_packages = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    # the dependencies, from the development virtualenv, after the venv's own packages
    (site_packages / "site-packages" / "dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install",
         "--quiet", "--disable-pip-version-check", "--no-deps", "--no-index", wheel],
        check=True, capture_output=True,
    )  # fmt: skip
    return wheel


def venv_of(wheel: Path) -> Path:
    return wheel.parent.parent / "venv"


def test_the_wheel_ships_the_package_and_its_data_and_no_tests(installed):
    names = zipfile.ZipFile(installed).namelist()
    for name in (
        "app/__init__.py",
        "app/serving/gunicorn_config.py",
        "app/openapi/openapi.json",
        "app/views/console/index.html",
    ):
        assert name in names
    assert any(name.startswith("app/backends/redis/lua/") for name in names)
    assert not [name for name in names if name.startswith(("tests/", "bench/", "wsgi"))]
    entry_points = next(name for name in names if name.endswith("entry_points.txt"))
    text = zipfile.ZipFile(installed).read(entry_points).decode()
    assert "token-service = app.serving.command:main" in text


def test_the_command_runs_the_operator_commands_from_another_folder(installed, tmp_path):
    venv = venv_of(installed)
    env = base_environment() | {"INSTANCE_PATH": str(tmp_path / "instance")}
    where = subprocess.run(
        [venv / "bin" / "python", "-c", "import app; print(app.__file__)"],
        cwd=tmp_path, env=env, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert where.startswith(str(venv))  # the installed package, not the repository's
    help_text = subprocess.run(
        [venv / "bin" / "token-service", "--help"],
        cwd=tmp_path, env=env, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    for command in ("serve", "tokens", "users", "keys", "clients", "sessions"):
        assert f"  {command} " in help_text
    counted = subprocess.run(
        [venv / "bin" / "token-service", "tokens", "count"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert counted.returncode == 0, counted.stderr
    assert counted.stdout.split()[0] == "0"


def test_a_bad_setting_is_the_services_one_line_error(installed, tmp_path):
    venv = venv_of(installed)
    env = base_environment() | {"INSTANCE_PATH": str(tmp_path), "PORT": "eighty"}
    for command in (["tokens", "count"], ["serve"]):
        result = subprocess.run(
            [venv / "bin" / "token-service", *command],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert result.returncode == 1, command
        (line,) = result.stderr.splitlines()
        assert line.startswith("configuration error: PORT"), line


def test_serve_runs_gunicorn_with_the_services_settings_from_another_folder(installed, tmp_path):
    venv = venv_of(installed)
    port = free_port()
    env = base_environment() | {
        "INSTANCE_PATH": str(tmp_path / "instance"),
        "PORT": str(port),
        "WEB_CONCURRENCY": "1",
    }
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen(
        [venv / "bin" / "token-service", "serve"],
        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        assert process.poll() is None, (tmp_path / "serve.log").read_text()
        try:
            return requests.get(f"{url}/healthz", timeout=3).status_code == 200
        except requests.ConnectionError:
            return False

    try:
        wait_until(answers, 30, "token-service serve")
        login = requests.post(f"{url}/login", json={"username": "alice"}, timeout=10)
        assert login.status_code == 200, login.text
        # the command became gunicorn itself (exec): the service's settings module, its app
        command_line = Path(f"/proc/{process.pid}/cmdline").read_bytes().split(b"\0")
        assert b"python:app.serving.gunicorn_config" in command_line
        assert b"app.serving.wsgi:app" in command_line
    finally:
        stop_process(process)
        log.close()
    assert process.returncode == 0
    lines = [json.loads(line) for line in (tmp_path / "serve.log").read_text().splitlines()]
    assert any("Booting worker" in line.get("message", "") for line in lines)
