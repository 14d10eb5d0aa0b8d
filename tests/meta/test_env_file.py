"""deploy/token-service.env.example: one file for systemd's EnvironmentFile= and a shell.

docs/deployment.md copies it to /etc/token-service/env; a unit reads it with
EnvironmentFile=, a person or a script with `set -a; . /etc/token-service/env; set +a`.
Both must read every value alike, the commented ones once uncommented too.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers.docs import marked_block
from tests.helpers.env_file import read_with_shell, read_with_systemd, systemd_generator
from tests.helpers.tools import ROOT, require_tool

EXAMPLE_ENV = ROOT / "deploy" / "token-service.env.example"
DEPLOYMENT = ROOT / "docs" / "deployment.md"
ASSIGNMENT = re.compile(r"^([A-Z][A-Z0-9_]*)=", re.M)


def uncommented(text: str) -> str:
    """Return the file with every commented-out assignment (``#NAME=...``) made live."""
    return re.sub(r"^#([A-Z][A-Z0-9_]*=)", r"\1", text, flags=re.M)


@pytest.fixture(params=["as-shipped", "every-line-uncommented"])
def example(request, tmp_path) -> Path:
    path = tmp_path / "env"
    text = EXAMPLE_ENV.read_text()
    path.write_text(text if request.param == "as-shipped" else uncommented(text))
    return path


def test_a_shell_reads_every_assignment_without_an_error(example):
    values = read_with_shell(example)
    assert set(values) == set(ASSIGNMENT.findall(example.read_text()))


def test_systemd_reads_every_value_as_the_shell_does(example, tmp_path):
    require_tool(
        systemd_generator() is not None, "systemd's env-file parser", "apt-get install systemd"
    )
    text = example.read_text()
    # the parser here expands $NAME, which EnvironmentFile= does not; a shell expands
    # `$`, backquotes and backslashes in double quotes: the file holds none of them
    assert not re.search(r"^[A-Z][A-Z0-9_]*=.*[$`\\]", text, re.M)
    names = set(ASSIGNMENT.findall(text))
    read = read_with_systemd(example, tmp_path / "systemd")  # with the system's own files
    # the generator drops an empty assignment (NAME=), which EnvironmentFile= keeps empty
    shell = {name: value for name, value in read_with_shell(example).items() if value}
    assert {name: value for name, value in read.items() if name in names} == shell


def test_the_documented_copy_works_on_a_host_without_the_folder(tmp_path):
    """The page's steps, with /etc under a test folder: the folder is made, then the file."""
    etc = tmp_path / "etc"
    etc.mkdir()
    steps = marked_block(DEPLOYMENT.read_text(), "env-file").replace("/etc/", f"{etc}/")
    subprocess.run(["sh", "-ec", steps], cwd=ROOT, check=True, timeout=30)
    copied = etc / "token-service" / "env"
    assert copied.read_text() == EXAMPLE_ENV.read_text()
    assert copied.stat().st_mode & 0o077 == 0  # it may hold a secret
