"""requirements*.txt are generated from pyproject.toml and still match what it declares."""

from __future__ import annotations

import re
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.helpers.tools import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
RUNTIME = [Requirement(line) for line in PROJECT["dependencies"]]
DEV = [Requirement(line) for line in PROJECT["optional-dependencies"]["dev"]]
REFRESH = "pyproject.toml changed without `make requirements`"
HASH = re.compile(r"\s--hash=sha256:[0-9a-f]{64}")


def pinned_lines(name: str) -> list[str]:
    """Return the requirement lines of a requirements file, continuations joined."""
    text = (ROOT / name).read_text().replace("\\\n", " ")
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line]


def pins(name: str) -> dict[str, list[Requirement]]:
    """Return a requirements file's pins by canonical name (one per marker fork)."""
    found = defaultdict(list)
    for line in pinned_lines(name):
        requirement = Requirement(HASH.split(line, 1)[0])
        found[canonicalize_name(requirement.name)].append(requirement)
    return found


def pinned_version(requirement: Requirement) -> str:
    (specifier,) = requirement.specifier
    return specifier.version


@pytest.mark.parametrize("name", ["requirements.txt", "requirements-dev.txt"])
def test_every_line_is_one_exact_pin_with_its_hashes(name):
    lines = pinned_lines(name)
    assert lines, name
    for line in lines:
        assert HASH.search(line), f"{name}: no hash: {line[:80]}"
        requirement = Requirement(HASH.split(line, 1)[0])  # -r, -e or a URL does not parse
        specifiers = list(requirement.specifier)
        assert len(specifiers) == 1, f"{name}: not one pin: {requirement}"
        assert specifiers[0].operator == "==", f"{name}: not exact: {requirement}"
        assert "*" not in specifiers[0].version, f"{name}: not exact: {requirement}"


@pytest.mark.parametrize(
    ("name", "declared"),
    [
        ("requirements.txt", RUNTIME),
        ("requirements-dev.txt", RUNTIME),
        ("requirements-dev.txt", DEV),
    ],
)
def test_every_declared_dependency_is_pinned_within_its_declared_range(name, declared):
    pinned = pins(name)
    for requirement in declared:
        versions = [pinned_version(pin) for pin in pinned[canonicalize_name(requirement.name)]]
        assert versions, f"{name} lacks {requirement.name}: {REFRESH}"
        for version in versions:
            assert requirement.specifier.contains(version, prereleases=True), (
                f"{name} pins {requirement.name}=={version}, outside {requirement}: {REFRESH}"
            )


def test_runtime_pins_are_the_versions_the_tests_run_on():
    """Each runtime pin's version is the development set's; a runtime marker may be the
    narrower (tzdata: psycopg needs it on Windows alone, a test tool everywhere)."""
    runtime, dev = pins("requirements.txt"), pins("requirements-dev.txt")
    for name, requirements in runtime.items():
        versions = sorted(map(pinned_version, requirements))
        assert versions == sorted(map(pinned_version, dev[name])), name


def test_the_tools_whose_verdicts_change_between_releases_are_pinned_exactly():
    declared = {canonicalize_name(requirement.name): requirement for requirement in DEV}
    for tool in ("ruff", "mypy", "uv"):  # uv: `make requirements` installs this exact pin
        (specifier,) = declared[tool].specifier
        assert specifier.operator == "==", declared[tool]


PACKAGE_DATA = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
    "package-data"
]


def test_every_data_file_of_the_package_is_declared_so_that_the_wheel_ships_it():
    data = [
        path.relative_to(ROOT)
        for path in (ROOT / "app").rglob("*")
        if path.is_file() and path.suffix not in {".py", ".pyc"}
    ]
    assert any(path.suffix == ".lua" for path in data)  # the Redis scripts
    assert Path("app/openapi/openapi.json") in data  # the API document
    missing = [
        str(path)
        for path in data
        if not any(
            path.relative_to(package.replace(".", "/")).match(pattern)
            for package, patterns in PACKAGE_DATA.items()
            if path.is_relative_to(package.replace(".", "/"))
            for pattern in patterns
        )
    ]
    assert missing == [], "add them to [tool.setuptools.package-data] in pyproject.toml"
