"""The Makefile a newcomer meets first: `make help`, and a clear word on an old Python."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.servers import free_port
from tests.helpers.tools import ROOT, which

pytestmark = pytest.mark.skipif(which("make") is None, reason="needs make")
MAKE_VARIABLES = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "WORKERS"}
#: The environment less the variables of a make this suite runs under (`make test`), so
#: that each make below is a top-level one, as a user's is: `make:`, not `make[1]:`.
CLEAN_ENV = {key: value for key, value in os.environ.items() if key not in MAKE_VARIABLES}


def make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), *args],
        capture_output=True, text=True, timeout=60, env=CLEAN_ENV,
    )  # fmt: skip


def test_make_help_lists_every_target_with_its_description():
    result = make("help")
    assert result.returncode == 0, result.stderr
    listed = dict(line.split(None, 1) for line in result.stdout.splitlines())
    targets = set(re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), re.M))
    assert targets <= set(listed), targets - set(listed)
    for target in ("run", "test", "test-fast", "lint", "format", "clean", "bench", "help"):
        assert listed[target].strip(), target
    # make run listens on loopback (tests/system/test_gunicorn.py starts it): the help says so
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


def test_make_names_a_missing_python_in_one_line(tmp_path):
    venv = tmp_path / "venv"
    result = make("PYTHON=python3.99-not-installed", f"VENV={venv}", "venv")
    assert result.returncode == 2  # make's status for a failed recipe
    assert only_the_line(result.stderr, "venv") == (
        "make: Python 3.11 or newer is needed, but python3.99-not-installed was not found;"
        " try: make PYTHON=python3.11 ..."
    )
    assert not venv.exists()


@pytest.mark.parametrize(
    ("interpreter", "problem"),
    [
        ("#!/bin/sh\nexit 1\n", "has a Python that cannot run ({python})"),
        (
            '#!/bin/sh\n[ "$1" = --version ] && echo "Python 3.9.2" && exit 0\nexit 1\n',
            "has Python 3.9.2, and 3.11 or newer is needed",
        ),
    ],
)
def test_make_reports_a_venv_whose_python_cannot_run_and_keeps_it(tmp_path, interpreter, problem):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    stale = venv / "bin" / "python"
    stale.write_text(interpreter)
    stale.chmod(0o755)
    (venv / "leftover").write_text("x")
    result = make(f"VENV={venv}", "venv")
    assert result.returncode == 2
    assert only_the_line(result.stderr, "venv") == (
        f"make: the virtualenv {venv} {problem.format(python=stale)};"
        f" remove it (rm -rf {venv}) and run make again"
    )
    assert (venv / "leftover").read_text() == "x"  # nothing of the user's is removed
    assert stale.read_text() == interpreter


def test_make_run_shows_a_configuration_error_as_the_services_one_line(tmp_path):
    venv = Path(sys.prefix)  # the installed virtualenv; -o: its stamp is not remade
    result = subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), f"VENV={venv}",
         "-o", f"{venv}/.installed-runtime", "run"],
        env={**CLEAN_ENV, "METRICS": "maybe", "INSTANCE_PATH": str(tmp_path / "instance"),
             "PORT": str(free_port())},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    # gunicorn's line, then make's own: GNU make exits 2 for any failed recipe
    assert only_the_line(result.stderr, "run").startswith("configuration error: METRICS ")
    assert result.returncode == 2
    assert result.stdout == ""  # the recipe is not echoed


def test_make_run_installs_only_what_serving_needs():
    plan = make("-n", "VENV=/nonexistent-venv", "run").stdout
    assert "-r requirements.txt" in plan
    assert "requirements-dev.txt" not in plan
    assert "touch /nonexistent-venv/.installed-runtime" in plan
    assert plan.splitlines()[-1] == "/nonexistent-venv/bin/gunicorn -c gunicorn.conf.py wsgi:app"


def test_make_test_installs_the_development_set():
    plan = make("-n", "VENV=/nonexistent-venv", "/nonexistent-venv/.installed").stdout
    assert "-r requirements-dev.txt" in plan
    # the development set holds the runtime set: make run then installs nothing more
    assert "touch /nonexistent-venv/.installed /nonexistent-venv/.installed-runtime" in plan


def only_the_line(stderr: str, target: str) -> str:
    """Return the one line of a failure, checking that make's own line alone follows it."""
    line, make_line = stderr.splitlines()
    assert re.fullmatch(rf"make: \*\*\* \[Makefile:[0-9]+: {target}\] Error 1", make_line)
    return line


@pytest.mark.parametrize("target", ["test", "test-fast"])
def test_the_suite_runs_on_half_as_many_again_workers_as_cores_unless_one_is_asked_for(target):
    def pytest_line(*args: str) -> str:
        result = make("--dry-run", target, *args)
        assert result.returncode == 0, result.stderr
        return next(line for line in result.stdout.splitlines() if "-m pytest" in line)

    cores = len(os.sched_getaffinity(0))  # what nproc counts
    if cores > 1:
        assert f" -n {cores + cores // 2} --dist worksteal" in pytest_line()
    assert " -n 4 " in pytest_line("WORKERS=4")
    assert " -p no:xdist" in pytest_line("WORKERS=1")
    assert " -n " not in pytest_line("WORKERS=1")


def test_test_fast_leaves_out_the_tests_that_start_python_processes():
    result = make("--dry-run", "test-fast")
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if "-m pytest" in line)
    expression = re.search(r'-m "([^"]+)"', line)
    assert expression is not None, line
    assert re.search(r"\bor processes\b", expression.group(1)), line


def test_the_makefile_s_commands_write_bytecode_whatever_the_environment_says():
    result = subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), "--eval", "show-env: ; @env", "show-env"],
        capture_output=True, text=True, timeout=60,
        env={**CLEAN_ENV, "PYTHONDONTWRITEBYTECODE": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "PATH=" in result.stdout
    assert "PYTHONDONTWRITEBYTECODE" not in result.stdout


@pytest.mark.processes
def test_a_test_that_starts_python_unmarked_fails_and_one_marked_passes(tmp_path):
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import _python_processes_are_marked  # noqa: F401\n"
    )
    (tmp_path / "test_starts.py").write_text(
        "import subprocess\nimport sys\n\nimport pytest\n\n\n"
        "def test_unmarked():\n"
        "    subprocess.run([sys.executable, '-c', 'pass'], check=True)\n\n\n"
        "@pytest.mark.processes\ndef test_marked():\n"
        "    subprocess.run([sys.executable, '-c', 'pass'], check=True)\n\n\n"
        "def test_another_program():\n"
        "    subprocess.run(['true'], check=True)\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
         "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={**CLEAN_ENV, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert "1 failed, 2 passed" in result.stdout, result.stdout
    assert f"test_unmarked starts {sys.executable}: mark it processes" in result.stdout
