"""An environment file read as its two readers read it: a POSIX shell and systemd."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

#: systemd's user-environment generator: it reads environment.d files with the parser of
#: EnvironmentFile= (systemd's env-file.c), then prints the result. It also expands
#: $VARIABLE, which EnvironmentFile= does not: the files read here hold no `$`.
GENERATOR_PATHS = (
    "/usr/lib/systemd/user-environment-generators/30-systemd-environment-d-generator",
    "/lib/systemd/user-environment-generators/30-systemd-environment-d-generator",
)


def systemd_generator() -> str | None:
    return next((path for path in GENERATOR_PATHS if os.access(path, os.X_OK)), None)


def read_with_shell(path: Path) -> dict[str, str]:
    """Return the variables ``set -a; . path`` exports, in an empty environment."""
    result = subprocess.run(
        ["sh", "-c", 'set -a; . "$0"; set +a; env -0', str(path)],
        env={},
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert not result.stderr, result.stderr.decode()  # no line ran as a command
    pairs = (item.decode().split("=", 1) for item in result.stdout.split(b"\0") if item)
    return {name: value for name, value in pairs if name not in {"PWD", "SHLVL", "_"}}


def read_with_systemd(path: Path, folder: Path) -> dict[str, str]:
    """Return the variables systemd's environment-file parser reads from ``path``."""
    generator = systemd_generator()
    assert generator is not None
    config = folder / "environment.d"
    config.mkdir(parents=True)
    (config / "50-test.conf").write_bytes(path.read_bytes())
    empty = folder / "empty"
    empty.mkdir()
    result = subprocess.run(
        [generator],
        # only this folder: no user's, and the system's folders are shadowed by none here
        env={"XDG_CONFIG_HOME": str(folder), "HOME": str(empty)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    values = {}
    for line in result.stdout.splitlines():
        name, value = shlex.split(line)[0].split("=", 1)
        values[name] = value
    return values
