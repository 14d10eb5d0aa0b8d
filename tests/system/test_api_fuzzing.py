"""Schemathesis against a real gunicorn: every documented operation, every check, on the
service's own OpenAPI document (tests/schemathesis.toml)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from app.auth.keys import load_key_ring
from app.auth.tokens import issue_cookie_token
from tests.helpers.openapi import documented
from tests.helpers.servers import fresh
from tests.helpers.tools import ROOT

SCHEMATHESIS_CONFIG = ROOT / "tests" / "schemathesis.toml"


#: Bound of one run; it takes about 90 s on a loaded 2-core machine.
SCHEMATHESIS_TIMEOUT = 360


@pytest.mark.gunicorn
@pytest.mark.store("sqlite")  # once: the Redis store's answers are its own suites' to check
def test_schemathesis_finds_nothing_against_a_real_gunicorn(
    gunicorn_server, signing_secret, tmp_path
):
    lifetime = 3600  # longer than the run: every case carries a valid token
    server = gunicorn_server(
        {"SIGNING_SECRET": signing_secret, "ACCESS_TOKEN_LIFETIME": str(lifetime)}
    )
    admin = fresh("POST", f"{server.url}/login", json={"username": "admin"}).json()
    user = {"source": "corp", "id": "248289761001", "shownName": "Alice Smith"}
    env = {
        **{key: value for key, value in os.environ.items() if key in {"PATH", "HOME"}},
        "API_ACCESS_TOKEN": admin["accessToken"],
        "API_COOKIE_TOKEN": issue_cookie_token(user, load_key_ring(signing_secret), lifetime),
    }
    operations = len(documented(fresh("GET", f"{server.url}/openapi.json").json()))
    # DELETE /sessions would log the run's own admin out everywhere, and leave it nothing
    # but 401s to see: tests/api/test_sessions.py checks it instead. Every check runs (the
    # default: `--checks all` would also override tests/schemathesis.toml's one exception)
    command = [
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(SCHEMATHESIS_CONFIG),
        "run", f"{server.url}/openapi.json", "--no-color",
        "--exclude-operation-id", "logOutEverywhere",
    ]  # fmt: skip
    result = subprocess.run(
        command,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=SCHEMATHESIS_TIMEOUT,
        check=False,
    )
    report = result.stdout[-20_000:] + result.stderr[-5_000:]
    assert result.returncode == 0, report
    # every operation but GET /openapi.json, which schemathesis reads rather than tests, and
    # DELETE /sessions
    assert f"Tested: {operations - 2}" in result.stdout, report
