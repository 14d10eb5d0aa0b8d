"""The Makefile a newcomer meets first: `make help`, and a clear word on an old Python."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.conftest import ROOT, which

pytestmark = pytest.mark.skipif(which("make") is None, reason="needs make")
MAKE_VARIABLES = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "WORKERS"}


def make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_make_help_lists_every_target_with_its_description():
    result = make("help")
    assert result.returncode == 0, result.stderr
    listed = dict(line.split(None, 1) for line in result.stdout.splitlines())
    targets = set(re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), re.M))
    assert targets <= set(listed), targets - set(listed)
    for target in ("run", "test", "test-fast", "lint", "format", "clean", "bench", "help"):
        assert listed[target].strip(), target
    # make run listens on loopback (tests/test_gunicorn.py starts it): the help says so
    assert "default 127.0.0.1:8080" in listed["run"]


def test_make_refuses_an_old_python_in_one_line_and_makes_no_venv(tmp_path):
    old_python = tmp_path / "python3.9"
    old_python.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --version ]; then echo "Python 3.9.2"; exit 0; fi\n'
        "exit 1  # sys.version_info < (3, 11)\n"
    )
    old_python.chmod(0o755)
    venv = tmp_path / "venv"
    result = make(f"PYTHON={old_python}", f"VENV={venv}", f"{venv}/.installed")
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if not line.startswith("make:  ***")]
    assert errors[0] == (
        f"make: Python 3.11 or newer is needed, but {old_python} is Python 3.9.2;"
        " try: make PYTHON=python3.11 ..."
    )
    assert not venv.exists()


def test_make_replaces_a_venv_left_by_an_old_python(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    stale = venv / "bin" / "python"
    stale.write_text("#!/bin/sh\nexit 1\n")  # an interpreter older than 3.11
    stale.chmod(0o755)
    (venv / "leftover").write_text("x")
    result = make(f"VENV={venv}", "venv")
    assert result.returncode == 0, result.stderr
    assert not (venv / "leftover").exists()
    version = subprocess.run(
        [venv / "bin" / "python", "-c", "import sys; print(sys.version_info >= (3, 11))"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert version.stdout.strip() == "True"


@pytest.mark.parametrize("target", ["test", "test-fast"])
def test_the_suite_runs_on_every_core_unless_one_worker_is_asked_for(target):
    # not the variables of a make this suite runs under (`make test WORKERS=4`)
    env = {key: value for key, value in os.environ.items() if key not in MAKE_VARIABLES}

    def pytest_line(*args: str) -> str:
        result = subprocess.run(
            ["make", "--no-print-directory", "-C", str(ROOT), "--dry-run", target, *args],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return next(line for line in result.stdout.splitlines() if "-m pytest" in line)

    assert " -n auto --dist worksteal" in pytest_line()
    assert " -n 4 " in pytest_line("WORKERS=4")
    assert " -p no:xdist" in pytest_line("WORKERS=1")
    assert " -n " not in pytest_line("WORKERS=1")
