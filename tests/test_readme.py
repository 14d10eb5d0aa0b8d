"""The README stays true: its walk-through runs against a real server, its table is whole."""

from __future__ import annotations

import re
import subprocess
from dataclasses import fields

import pytest

from app.config import ConfigError, Settings
from tests.conftest import ROOT, require_tool, which

README = (ROOT / "README.md").read_text()
WALKTHROUGH = ROOT / "scripts" / "walkthrough.sh"
EXAMPLE_ENV = ROOT / "deploy" / "token-service.env.example"


def readme_block(name: str) -> str:
    match = re.search(rf"<!-- {name}:start -->\n```sh\n(.*?)```\n<!-- {name}:end -->", README, re.S)
    assert match, f"README has no {name} block"
    return match.group(1)


def script_body(path) -> str:
    lines = path.read_text().splitlines(keepends=True)
    start = next(n for n, line in enumerate(lines) if line.startswith("BASE_URL="))
    return "".join(lines[start:])


def test_readme_walkthrough_is_the_script():
    assert readme_block("walkthrough") == script_body(WALKTHROUGH)


def test_every_setting_is_in_the_configuration_table():
    names = [setting.metadata["env"] for setting in fields(Settings)]
    names += [
        f"OIDC_<NAME>_{suffix}" for suffix in ("ISSUER", "CLIENT_ID", "CLIENT_SECRET", "SCOPES")
    ]
    for name in names:
        assert f"| `{name}` |" in README, name


def test_example_env_file_names_every_setting_and_parses(tmp_path):
    text = EXAMPLE_ENV.read_text()
    for setting in fields(Settings):
        assert re.search(rf"^#?{setting.metadata['env']}=", text, re.M), setting.metadata["env"]
    values = dict(
        line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#")
    )
    assert values.pop("INSTANCE_PATH") == "/var/lib/token-service"  # not created by a test
    Settings.load({**values, "INSTANCE_PATH": str(tmp_path)})  # every value is one it starts with


def test_example_env_file_sets_no_signing_secret():
    assert not re.search(r"^SIGNING_SECRET=", EXAMPLE_ENV.read_text(), re.M)


def shown_secrets() -> set[str]:
    """Return every literal value the docs and examples give SIGNING_SECRET."""
    texts = [README, EXAMPLE_ENV.read_text(), *(p.read_text() for p in ROOT.glob("scripts/*"))]
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
