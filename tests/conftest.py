"""The suite's fixtures, from tests/helpers/ (one module per concern), and its kinds.

The suites are laid out by kind, each kind a folder and a marker of the same name
(``pytest -m unit``): ``unit`` (no app), ``api`` (the app through Flask's test client, on
SQLite), ``backends`` (the store and counters contracts, on every backend), ``system``
(real gunicorn, nginx, Redis, PostgreSQL, browsers, reloads, faults, full disks),
``meta`` (the README, the Makefile, packaging, the layers, the bench), and ``deploy`` (the
installed package, the container image, the Kubernetes manifests: ``make test-deploy``,
outside ``make test``). Helpers are
imported from tests/helpers/, never from here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Before the plugins load, so that the helpers' asserts report like the tests' own.
pytest.register_assert_rewrite("tests.helpers")

pytest_plugins = [
    "tests.helpers.apps",
    "tests.helpers.servers",
    "tests.helpers.stores",
]

#: Each kind of test: its folder under tests/ and its marker.
KINDS = {
    "unit": "no app: functions and classes on their own",
    "api": "the app through Flask's test client, on SQLite",
    "backends": "the store and counters contracts, run on every backend",
    "system": "real servers: gunicorn, nginx, Redis, PostgreSQL, a browser, faults",
    "meta": "the README, the Makefile, packaging, the layers, the bench",
    "deploy": "the installed package, the container image, the Kubernetes manifests",
}
TESTS = Path(__file__).resolve().parent
#: The markers of a test that may start processes: its kind's, or a server's, or ``processes``
#: (``make test-fast`` leaves each out).
STARTS_PROCESSES = (
    "system", "deploy", "processes", "gunicorn", "redis", "postgres", "nginx", "caddy", "oidc",
    "disk", "browser", "container", "systemd",
)  # fmt: skip
#: The programs that start a Python: the interpreter, and the service's commands.
PYTHON_PROGRAMS = {sys.executable, "python", "python3", "gunicorn", "flask", "token-service"}


def pytest_configure(config: pytest.Config) -> None:
    for kind, what in KINDS.items():
        config.addinivalue_line("markers", f"{kind}: {what} (tests/{kind}/)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its kind, the folder it lives in."""
    for item in items:
        kind = item.path.relative_to(TESTS).parts[0]
        if kind in KINDS:
            item.add_marker(kind)


@pytest.fixture(autouse=True)
def _python_processes_are_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that starts a Python process without a marker saying so: each costs
    about half a second, and ``make test-fast`` stays fast by leaving them out."""
    if any(request.node.get_closest_marker(name) for name in STARTS_PROCESSES):
        yield
        return
    popen = subprocess.Popen  # the class itself: a test may put another in its place
    start = popen.__init__

    def refuse_python(self, args, *rest, **named):
        program = os.fsdecode(args if isinstance(args, str | bytes | Path) else next(iter(args)))
        name = program.split()[0] if isinstance(args, str) else program  # a shell's command
        if name in PYTHON_PROGRAMS or Path(name).name.startswith(("python", *PYTHON_PROGRAMS)):
            pytest.fail(f"{request.node.nodeid} starts {name}: mark it processes")
        start(self, args, *rest, **named)

    popen.__init__ = refuse_python
    try:
        yield
    finally:
        popen.__init__ = start
