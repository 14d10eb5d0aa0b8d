"""make soak writes its runs where git does not look; published reports stay tracked."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.helpers.tools import ROOT, which
from tests.system.soak.__main__ import RUNS, parse_arguments

pytestmark = pytest.mark.skipif(
    which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a checkout"
)
REPORTS = ("soak-sqlite.md", "soak-sqlite.png", "soak-redis.md", "soak-redis.png")


def ignored(path: str) -> bool:
    result = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "--no-index", "-q", path],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr
    return result.returncode == 0


def test_the_soak_writes_its_reports_into_a_folder_git_ignores():
    assert parse_arguments([]).results == RUNS
    for name in REPORTS:
        assert ignored(str((RUNS / name).relative_to(ROOT))), name


def test_make_soak_passes_that_folder_to_the_soak():
    env = {key: value for key, value in os.environ.items() if not key.startswith("MAKE")}
    plan = subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), "-n", "VENV=/nonexistent-venv", "soak"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    ).stdout
    assert f"--results {RUNS.relative_to(ROOT)} " in plan


def test_the_published_reports_are_tracked_and_not_ignored():
    tracked = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "bench/results"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.split()
    for name in REPORTS:
        assert f"bench/results/{name}" in tracked
        assert not ignored(f"bench/results/{name}")
