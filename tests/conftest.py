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


def pytest_configure(config: pytest.Config) -> None:
    for kind, what in KINDS.items():
        config.addinivalue_line("markers", f"{kind}: {what} (tests/{kind}/)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its kind, the folder it lives in."""
    for item in items:
        kind = item.path.relative_to(TESTS).parts[0]
        if kind in KINDS:
            item.add_marker(kind)
