"""The README and docs/ stay true: their shell blocks run, their tables are whole, links resolve."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import fields
from pathlib import Path

import pytest
import requests

from app.config.parsers import ConfigError
from app.config.settings import Settings
from app.instance import prepare_instance
from tests.helpers.docs import marked_block
from tests.helpers.env_file import read_with_shell
from tests.helpers.oidc_harness import node_unavailable_reason, walk_login
from tests.helpers.servers import free_port, stop_process, wait_until
from tests.helpers.tools import ROOT, require_tool, which

README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
#: The README and every page of docs/ but the contract (a copy kept as it is).
PAGES = [ROOT / "README.md", *sorted(p for p in DOCS.glob("*.md") if p.name != "SPEC.md")]
WALKTHROUGH_PAGE = DOCS / "walkthrough.md"
CONFIGURATION = (DOCS / "configuration.md").read_text()
WALKTHROUGH = ROOT / "scripts" / "walkthrough.sh"
EXAMPLE_ENV = ROOT / "deploy" / "token-service.env.example"
#: Variables a shell block may use without setting them: the shell's own.
SHELL_VARIABLES = {"HOME", "PATH", "PWD"}


def shell_blocks(text: str) -> list[str]:
    """Return the page's sh blocks, those indented in a list item included, dedented."""
    blocks = re.findall(r"^ *```(?:sh|bash)\n(.*?)^ *```", text, re.S | re.M)
    return [textwrap.dedent(block) for block in blocks]


def script_body(path: Path) -> str:
    lines = path.read_text().splitlines(keepends=True)
    start = next(n for n, line in enumerate(lines) if line.startswith("BASE_URL="))
    return "".join(lines[start:])


def test_walkthrough_page_is_the_script():
    assert marked_block(WALKTHROUGH_PAGE.read_text(), "walkthrough") == script_body(WALKTHROUGH)


def test_the_readme_is_short_and_its_quick_start_ten_lines_at_most():
    assert README.count("\n") <= 200
    assert marked_block(README, "quickstart").count("\n") <= 10


def test_the_walkthroughs_say_how_long_access_tokens_last(tmp_path):
    """Typed by hand, the steps outlive a 60 s token: each walk-through says so first."""
    walkthrough = marked_block(WALKTHROUGH_PAGE.read_text(), "walkthrough")
    assert "60 by default" in walkthrough
    assert "ACCESS_TOKEN_LIFETIME=600 make run" in walkthrough
    before_quick_start = README[: README.index("<!-- quickstart:start -->")]
    assert "60 seconds" in before_quick_start
    assert "ACCESS_TOKEN_LIFETIME=600 make run" in before_quick_start
    assert (
        Settings.load({"INSTANCE_PATH": str(tmp_path)}).access_token_lifetime == 60
    )  # the figure the docs give


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_shell_variable_a_page_uses_is_set_on_that_page(page):
    """A snippet copied from a page finds every variable it reads (no undefined $BASE)."""
    text = "\n".join(shell_blocks(page.read_text()))
    used = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", text))
    assigned = set(re.findall(r"(?:^|[\s;(])(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=", text, re.M))
    assert used - assigned - SHELL_VARIABLES == set()


def heading_anchors(text: str) -> set[str]:
    """Return the anchors of a page's headings, as GitHub makes them."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    headings = re.findall(r"^#+ (.*)$", text, re.M)
    return {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings
    }


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_link_of_a_page_resolves(page):
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("https://", "http://")):
            continue
        path, _, anchor = target.partition("#")
        linked = page.parent / path if path else page
        assert linked.is_file(), target
        if anchor:
            assert anchor in heading_anchors(linked.read_text()), target


def test_every_citation_of_the_spec_resolves():
    assert (DOCS / "SPEC.md").read_text().startswith("# ")
    for page in PAGES:
        text = page.read_text()
        # a link to the contract goes to docs/SPEC.md
        for target in re.findall(r"\]\(([^)]*SPEC\.md)\)", text):
            assert (page.parent / target).resolve() == DOCS / "SPEC.md", (page.name, target)


def test_every_setting_is_in_the_configuration_table():
    names = [setting.metadata["env"] for setting in fields(Settings)]
    names += [
        f"OIDC_<NAME>_{suffix}" for suffix in ("ISSUER", "CLIENT_ID", "CLIENT_SECRET", "SCOPES")
    ]
    for name in names:
        assert f"| `{name}` |" in CONFIGURATION, name


def test_an_absolute_sqlite_path_has_four_slashes_as_the_docs_say(tmp_path):
    example = "sqlite:////var/lib/token-service/refresh_tokens.sqlite3"
    assert f"TOKEN_STORE_URL={example}" in CONFIGURATION
    assert "**four** slashes" in CONFIGURATION
    # four slashes: the absolute path; three: a path relative to where the service starts
    folder = tmp_path / "missing"
    with pytest.raises(ConfigError, match=f"TOKEN_STORE_URL: {folder} does not exist"):
        prepare_instance(
            Settings.load(
                {"TOKEN_STORE_URL": f"sqlite:///{folder}/t.sqlite3", "INSTANCE_PATH": str(tmp_path)}
            )
        )
    assert str(folder).startswith("/")  # so the URL above had four slashes


@pytest.mark.parametrize("word", ["true", "on", "yes", "1", "false", "off", "no", "0", "OFF"])
def test_every_yes_or_no_word_the_docs_give_is_accepted(tmp_path, word):
    assert re.search(rf"`{word.lower()}`", CONFIGURATION.split("**Yes or no.**")[1][:400])
    settings = Settings.load({"METRICS": word, "INSTANCE_PATH": str(tmp_path)})
    assert settings.metrics is (word.lower() in {"true", "on", "yes", "1"})


def test_example_env_file_names_every_setting_and_parses(tmp_path):
    text = EXAMPLE_ENV.read_text()
    for setting in fields(Settings):
        assert re.search(rf"^#?{setting.metadata['env']}=", text, re.M), setting.metadata["env"]
    values = read_with_shell(EXAMPLE_ENV)  # as `set -a; . file` reads it (quotes and all)
    assert values.pop("INSTANCE_PATH") == "/var/lib/token-service"  # not created by a test
    Settings.load({**values, "INSTANCE_PATH": str(tmp_path)})  # every value is one it starts with


def test_example_env_file_sets_no_signing_secret():
    assert not re.search(r"^SIGNING_SECRET=", EXAMPLE_ENV.read_text(), re.M)


def shown_secrets() -> set[str]:
    """Return every literal value the docs and examples give SIGNING_SECRET."""
    texts = [
        *(page.read_text() for page in PAGES),
        EXAMPLE_ENV.read_text(),
        *(p.read_text() for p in ROOT.glob("scripts/*")),
    ]
    found = set()
    for text in texts:
        for value in re.findall(r"SIGNING_SECRET=([^\s'\"]+)", text):
            if not value.startswith(("$", "<")):  # a variable or a placeholder, not a value
                found.add(value)
    return found


def test_no_secret_shown_in_the_docs_can_start_the_service(tmp_path):
    for secret in shown_secrets() | {"change-me-to-48-random-url-safe-characters-from-secrets"}:
        with pytest.raises(ConfigError, match="example value from the project's docs"):
            Settings.load({"SIGNING_SECRET": secret, "INSTANCE_PATH": str(tmp_path)})


@pytest.mark.gunicorn
def test_walkthrough_runs_against_gunicorn(gunicorn_server):
    require_tool(bool(which("curl") and which("jq")), "curl and jq", "apt-get install curl jq")
    server = gunicorn_server(workers=2)
    result = subprocess.run(
        ["bash", str(WALKTHROUGH)],
        env={"PATH": "/usr/bin:/bin", "BASE_URL": server.url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.match(r'\{"accessToken":"[^"]+","refreshToken":"[A-Za-z0-9]{42}"\}\n', out)
    assert '"message":"for all users"' in out
    assert '"guestsCount":4' in out
    assert re.search(r'HTTP/1.1 403 FORBIDDEN\n.*\n\n\{"message":"No access"\}', out, re.S)
    assert out.count('{"message":"No access"}\n') == 2
    assert len(re.findall(r"HTTP/1.1 401 UNAUTHORIZED\n.*?\n\nUnauthorized", out, re.S)) == 2
    assert "WWW-Authenticate: Bearer" in out
    assert '"message":"for admins only"' in out
    # refresh, revoke (silent), then the same refresh refused
    assert re.search(r'^\{"accessToken":"[^"]+"\}\nUnauthorized$', out, re.M)
    assert re.search(r'\{"status":"ok"\}\n\{"status":"ready"\}\n3\.1\.0\n404\n[1-9][0-9]*\n$', out)


@pytest.mark.gunicorn
@pytest.mark.store("sqlite")  # the README's quick start checks HTTP answers, one store is enough
def test_readme_quick_start_runs_against_gunicorn(gunicorn_server):
    require_tool(bool(which("curl") and which("jq")), "curl and jq", "apt-get install curl jq")
    server = gunicorn_server(workers=2)
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", marked_block(README, "quickstart")],
        env={"PATH": "/usr/bin:/bin", "BASE_URL": server.url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert lines[0].startswith('{"message":"for all users","user":{"username":"alice"')
    assert lines[1:3] == ['{"message":"No access"}', "403"]
    assert re.fullmatch(r'\{"accessToken":"[^"]+"\}', lines[3])
    assert lines[4:] == ["204"]


@pytest.mark.oidc
@pytest.mark.gunicorn
@pytest.mark.store("sqlite")
def test_third_party_login_tried_locally_as_the_page_says(tmp_path):
    """The commands of docs/third-party-login.md's "Try it locally", on free ports."""
    reason = node_unavailable_reason()
    require_tool(reason is None, "node and the oidc-provider package", str(reason))
    text = (DOCS / "third-party-login.md").read_text()
    provider_block, service_block = shell_blocks(text[text.index("## Try it locally") :])
    provider_port, service_port = free_port(), free_port()

    def command(block: str) -> str:
        lines = [line for line in block.splitlines() if not line.startswith("npm ")]
        local = "\n".join(lines).replace("9000", str(provider_port))
        local = local.replace("8080", str(service_port))
        gunicorn = f"{sys.prefix}/bin/gunicorn -c gunicorn.conf.py wsgi:app"
        return "exec env " + local.replace("make run", gunicorn)  # one process, stopped by its PID

    # make run's PORT is 8080 by default: here the free one, as the callback says
    env = {
        "PATH": os.environ["PATH"],
        "INSTANCE_PATH": str(tmp_path / "instance"),
        "PORT": str(service_port),
    }
    processes = []
    for block, name in ((provider_block, "provider"), (service_block, "service")):
        with (tmp_path / f"{name}.log").open("wb") as log:
            bash = ["bash", "-c", command(block)]
            process = subprocess.Popen(bash, cwd=ROOT, env=env, stdout=log, stderr=log)
            processes.append(process)
    base = f"http://127.0.0.1:{service_port}"
    try:
        with requests.Session() as browser:
            browser.trust_env = False
            wait_until(lambda: answers(browser, f"{base}/healthz"), 30, "the service")
            issuer = f"http://127.0.0.1:{provider_port}"
            wait_until(
                lambda: answers(browser, f"{issuer}/.well-known/openid-configuration"),
                30,
                "the provider",
            )
            start = browser.get(f"{base}/auth/local/login", allow_redirects=False, timeout=10)
            back = walk_login(browser, start.headers["Location"], "alice", "any")
            landed = browser.get(back.headers["Location"], timeout=10)
            assert landed.url == f"{base}/api/v1/me"
            assert landed.json() == {"source": "local", "id": "alice", "shownName": "Alice Example"}
    finally:
        for process in processes:
            stop_process(process)
    assert '`{"source":"local","id":"alice","shownName":"Alice Example"}`' in text


def answers(session: requests.Session, url: str) -> bool:
    try:
        return session.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False
