"""The container image as the tests build and run it, with podman, on a machine that reaches
Debian's mirror but no container registry, nor PyPI from inside a build.

- The base image the Containerfile starts FROM is a stand-in made from Debian's packages
  (``mmdebstrap``, then ``podman import`` under the same name), once per machine.
- pip in the build reads a wheelhouse this host downloads (its pip trusts the host's
  certificate authorities; a build does not) through the build context: the Containerfile
  installs from a ``wheelhouse/`` folder when there is one, in its build stage only.
- podman runs under a containers.conf of the tests' own: runc, cgroupfs, no default
  ulimits.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement

from tests.helpers.tools import ROOT

#: The tools the container tests need, and Debian's packages that have them.
TOOLS = {
    "podman": "podman",
    "runc": "runc",
    "mmdebstrap": "mmdebstrap",
    "slirp4netns": "slirp4netns",
}
#: What the tests' podman runs with: crun fails on some kernels' cgroup layout.
CONTAINERS_CONF = """\
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"

[containers]
default_ulimits = []
"""
#: Debian's release whose packages make the stand-in for the Containerfile's base.
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
#: What Debian's slim images leave out of every package (their dpkg configuration, kept in
#: the image, so that the packages a build adds leave it out too).
SLIM_PATHS = [
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/groff/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/linda/*",
    "path-exclude=/usr/share/lintian/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
    "path-exclude=/usr/share/man/*",
]
HASH = re.compile(r"\s--hash=sha256:[0-9a-f]{64}")


def missing_tools() -> list[str]:
    """Return the Debian packages to install for the container tests, none if all are here."""
    return [package for program, package in TOOLS.items() if shutil.which(program) is None]


def podman_environment(folder: Path) -> dict[str, str]:
    """Return this process's environment with CONTAINERS_CONF naming a file in ``folder``."""
    conf = folder / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    return {**os.environ, "CONTAINERS_CONF": str(conf)}


def podman(env: dict[str, str], *arguments: str, timeout: float = 60, check: bool = True,
           input: str | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Run one podman command, its output captured as text."""
    return subprocess.run(
        ["podman", *arguments],
        env=env, capture_output=True, text=True, timeout=timeout, check=check, input=input,
    )  # fmt: skip


def base_image_name(containerfile: Path = ROOT / "Containerfile") -> str:
    """Return the image the Containerfile's first stage starts FROM."""
    match = re.search(r"^FROM\s+(\S+)", containerfile.read_text(), re.M)
    assert match, "the Containerfile has no FROM"
    return match.group(1)


def ensure_base_image(env: dict[str, str], folder: Path) -> None:
    """Make the stand-in for the base image from Debian's packages, unless podman has it."""
    name = base_image_name()
    if podman(env, "image", "exists", name, check=False).returncode == 0:
        return
    archive = folder / "base.tar"
    subprocess.run(
        ["mmdebstrap", "--quiet", "--variant=minbase",
         *(f"--dpkgopt={option}" for option in SLIM_PATHS),
         DEBIAN_SUITE, archive, DEBIAN_MIRROR],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    podman(env, "import", "--quiet", str(archive), name, timeout=300)
    archive.unlink()


def container_python_version() -> str:
    """Return the version of Debian's python3.11 that the image's build installs: the
    markers of requirements.txt are evaluated for it, not for this host's Python."""
    policy = subprocess.run(
        ["apt-cache", "policy", "python3.11"], check=True, capture_output=True, text=True
    ).stdout
    match = re.search(r"Candidate:\s*(\d+\.\d+\.\d+)", policy)
    assert match, policy
    return match.group(1)


def hashed_requirements(name: str) -> list[tuple[Requirement, str]]:
    """Return each requirement of a requirements file, with its ``--hash`` options."""
    text = (ROOT / name).read_text().replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()  # a comment: "# via ..."
        if not line:
            continue
        requirement = Requirement(HASH.split(line, 1)[0].strip())
        found.append((requirement, " ".join(HASH.findall(line))))
    return found


def download_wheelhouse(folder: Path) -> Path:
    """Download into ``folder`` the wheels the image's build installs: requirements.txt's,
    for the image's Python, and the build system's setuptools (requirements-dev.txt's pin),
    each checked against its hash."""
    python = container_python_version()
    environment = {"python_full_version": python, "python_version": python.rsplit(".", 1)[0]}
    lines = [
        f"{requirement.name}{requirement.specifier} {hashes}"
        for requirement, hashes in hashed_requirements("requirements.txt")
        if requirement.marker is None or requirement.marker.evaluate(environment)
    ]
    lines += [
        f"{requirement.name}{requirement.specifier} {hashes}"
        for requirement, hashes in hashed_requirements("requirements-dev.txt")
        if requirement.name == "setuptools"
    ]
    wanted = folder / "wheelhouse.txt"
    wanted.write_text("\n".join(lines) + "\n")
    wheelhouse = folder / "wheelhouse"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
         "--require-hashes", "--no-deps", "--only-binary=:all:", "-r", wanted, "-d", wheelhouse],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return wheelhouse


def clean_clone(folder: Path) -> Path:
    """Clone this repository's HEAD into ``folder``: what a newcomer builds from."""
    subprocess.run(
        ["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(folder)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return folder


def image_name() -> str:
    """Return the name and tag ``make image`` gives the image."""
    plan = subprocess.run(
        ["make", "-s", "--no-print-directory", "print-image"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return plan.strip()
