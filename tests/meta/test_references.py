"""Every path the repository's files name is a file or folder the repository holds.

Docs, comments and docstrings name files by path (``app/http/guards.py``,
``docs/stores.md``, a markdown link); a file moved or removed leaves them pointing
nowhere. Nor may any file cite a page kept outside the repository.
"""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess

import pytest

from tests.helpers.tools import ROOT

#: The files whose references are checked: docs, code, settings and the Makefile.
SCANNED_SUFFIXES = (".md", ".py", ".toml", ".conf", ".cfg")
SCANNED_NAMES = ("Makefile",)
#: A path under one of the repository's folders, not inside a URL or a longer path; ``*``
#: and ``<placeholder>`` or ``{placeholder}`` stand for any text.
REFERENCE = re.compile(r"(?<![\w./~$-])(?:app|tests|docs|bench|deploy|scripts|\.ci)/[\w./*<>{}-]*")
#: A markdown link's target: ``[text](target)``.
LINK = re.compile(r"\]\(([^)\s]+)\)")
#: Characters that end a sentence or a quote around a path rather than the path itself.
TRAILING = ".,:;'\"`)]"
#: Paths that are made when the project is set up or run, never held by the repository.
GENERATED = {
    "tests/system/oidc_provider/node_modules": "npm ci installs the provider's packages there",
    "bench/results/runs": "make soak writes each run there, a folder git ignores",
}
#: A section of a page cited by its path and its heading: ``docs/stores.md, "Moving tokens"``.
SECTION = re.compile(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.md), \"([^\"]+)\"")
#: The names of pages kept outside the repository, which nothing may cite.
OUTSIDE_PAGES = re.compile(r"\b(?:DESIGN|STYLE)\.md\b")


def held_files() -> list[str]:
    """Return every file of the working tree that git tracks or would track."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        text=True,
    ).stdout.split("\0")
    return sorted(name for name in set(listed) if name and (ROOT / name).is_file())


def folders_of(files: list[str]) -> set[str]:
    """Return every folder that holds one of ``files``, at any depth."""
    parts = [name.split("/")[:-1] for name in files]
    return {"/".join(path[:end]) for path in parts for end in range(1, len(path) + 1)}


FILES = held_files()
HELD = set(FILES) | folders_of(FILES)
#: This file is left out: its examples name missing paths on purpose.
THIS_FILE = "tests/meta/test_references.py"
SCANNED = [
    name
    for name in FILES
    if (name.endswith(SCANNED_SUFFIXES) or os.path.basename(name) in SCANNED_NAMES)
    and name != THIS_FILE
]


def is_held(path: str) -> bool:
    """Return whether ``path`` names a file or folder of the repository (a pattern: any)."""
    path = path.rstrip("/")
    if any(path == made or path.startswith(made + "/") for made in GENERATED):
        return True
    if not re.search(r"[*<{]", path):
        return path in HELD
    pattern = re.sub(r"<[^>]*>|\{[^}]*\}", "*", path)
    return any(fnmatch.fnmatchcase(name, pattern) for name in HELD)


def references(name: str, text: str) -> list[tuple[int, str]]:
    """Return each path ``text`` names, as (line, path relative to the repository's root)."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in REFERENCE.finditer(line):
            found.append((number, match.group().rstrip(TRAILING)))
        if not name.endswith(".md"):
            continue
        for target in LINK.findall(line):
            if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:|#", target):  # a URL, or an anchor here
                continue
            path = os.path.normpath(os.path.join(os.path.dirname(name), target.partition("#")[0]))
            found.append((number, path))
    return found


def test_every_path_a_file_names_is_held():
    broken = [
        f"{name}:{number}: {path}"
        for name in SCANNED
        for number, path in references(name, (ROOT / name).read_text(encoding="utf-8"))
        if not is_held(path)
    ]
    assert not broken, "paths the repository does not hold:\n" + "\n".join(broken)


def test_every_section_a_file_cites_starts_a_heading_of_its_page():
    """A heading cited may be shortened to its first words, never changed."""
    missing = []
    for name in SCANNED:
        lines = (ROOT / name).read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            for page, section in SECTION.findall(line):
                places = [ROOT / page, (ROOT / name).parent / page]  # from the root, or beside
                found = next((place for place in places if place.is_file()), None)
                text = found.read_text(encoding="utf-8") if found is not None else ""
                headings = re.findall(r"^#+ (.*)$", text, re.M)
                if not any(heading.lower().startswith(section.lower()) for heading in headings):
                    missing.append(f"{name}:{number}: {page}, {section!r}")
    assert not missing, "sections their pages do not hold:\n" + "\n".join(missing)


def test_no_file_cites_a_page_outside_the_repository():
    citing = []
    for name in FILES:
        try:
            text = (ROOT / name).read_text(encoding="utf-8")
        except UnicodeDecodeError:  # an image, a binary
            continue
        lines = enumerate(text.splitlines(), 1)
        citing += [f"{name}:{n}" for n, line in lines if OUTSIDE_PAGES.search(line)]
    assert not citing, "pages the repository does not hold, cited:\n" + "\n".join(citing)


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("see app/http/guards.py.", ["app/http/guards.py"]),
        ("(`docs/stores.md`), and", ["docs/stores.md"]),
        ("https://example.com/docs/x.md and /opt/app/x and my_app/x", []),
        (
            "deploy/nginx/gateway-*.conf, bench/results/soak-<store>.png",
            ["deploy/nginx/gateway-*.conf", "bench/results/soak-<store>.png"],
        ),
        (
            "[soak](../bench/results/soak-sqlite.md#top) [web](https://x.org/a) [here](#a)",
            ["bench/results/soak-sqlite.md"],
        ),
    ],
)
def test_references_are_read_as_paths_from_the_root(text, found):
    assert [path for _, path in references("docs/page.md", text)] == found


def test_a_reference_is_held_only_when_its_file_or_folder_is():
    assert is_held("app/http/guards.py")
    assert is_held("app/http/")
    assert is_held("deploy/nginx/gateway-*.conf")
    assert is_held("bench/results/soak-<store>.png")
    assert is_held("tests/system/oidc_provider/node_modules/.bin")
    assert not is_held("app/compat/private_apis.py")
    assert not is_held("app/http/guard")
    assert not is_held("bench/results/<name>.nothing")
