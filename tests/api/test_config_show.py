"""``flask config show``: every setting, where it came from, and no secret in clear."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from app.cli.config import effective_settings, shown
from app.config.config_file import MASK
from app.config.settings import Settings, setting_names
from tests.helpers.tools import ROOT

SECRET = "kq3Vn8ZxT2wLr5Yb7Hc9Jd1Mf4Pg6Rs0Ut2Wv4Xy6Za8"
PREVIOUS = "Pm4Lx9Qw2Er7Ty5Ui8Op3As6Df1Gh0Jk4Zx7Cv2Bn5Ma9"


def config_show(tmp_path, **environ: str) -> dict[str, tuple[str, str]]:
    """Run ``flask config show`` as an operator would; return each name's origin and value."""
    env = {"PATH": os.environ["PATH"], "INSTANCE_PATH": str(tmp_path / "instance"), **environ}
    result = subprocess.run(
        [sys.executable, "-m", "flask", "--app", "wsgi", "config", "show"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    for secret in (SECRET, PREVIOUS, "hunter2"):
        assert secret not in result.stdout + result.stderr
    rows = {}
    for line in result.stdout.splitlines():
        name, origin, *value = line.split(maxsplit=2)
        rows[name] = (origin, value[0] if value else "")
    return rows


@pytest.mark.processes
def test_show_says_where_each_setting_came_from_and_masks_every_secret(tmp_path):
    config_file = tmp_path / "config.toml"
    config_file.write_text(
        f"PORT = 9001\nLOG_LEVEL = 'WARNING'\nSIGNING_SECRET_PREVIOUS = ['{PREVIOUS}']\n"
    )
    config_file.chmod(0o600)
    rows = config_show(
        tmp_path,
        CONFIG_FILE=str(config_file),
        SIGNING_SECRET=SECRET,
        LOG_LEVEL="ERROR",
        TOKEN_STORE_URL="redis://:hunter2hunter2@127.0.0.1:1/0",
    )
    assert set(rows) == setting_names()
    assert rows["CONFIG_FILE"] == ("environment", str(config_file))
    assert rows["SIGNING_SECRET"] == ("environment", MASK)
    assert rows["SIGNING_SECRET_PREVIOUS"] == ("file", MASK)
    assert rows["PORT"] == ("file", "9001")
    assert rows["LOG_LEVEL"] == ("environment", "ERROR")
    assert rows["TOKEN_STORE_URL"] == ("environment", f"redis://:{MASK}@127.0.0.1:1/0")
    assert rows["ACCESS_TOKEN_LIFETIME"] == ("default", "60")
    assert rows["RATE_LIMIT_EXEMPT"] == ("default", "127.0.0.0/8, ::1/128")


@pytest.mark.processes
def test_show_masks_the_generated_secret_too(tmp_path):
    rows = config_show(tmp_path)
    assert rows["SIGNING_SECRET"] == ("default", MASK)
    generated = (tmp_path / "instance" / "signing_secret").read_text().strip()
    assert generated not in str(rows)
    assert rows["TOKEN_STORE_URL"][1].startswith("sqlite:///")


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("SIGNING_SECRET", SECRET, MASK),
        ("SIGNING_SECRET_PREVIOUS", f"{SECRET}, {PREVIOUS}", MASK),
        ("OIDC_ACME_CLIENT_SECRET", SECRET, MASK),
        ("OIDC_ACME_CLIENT_ID", "token-service", "token-service"),
        ("SIGNING_SECRET_PREVIOUS", "", ""),
        ("TOKEN_STORE_URL", "redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        (
            "TOKEN_STORE_URL",
            "postgresql://svc@db/tokens?password=hunter2&sslmode=require",
            f"postgresql://svc@db/tokens?password={MASK}&sslmode=require",
        ),
        ("TOKEN_STORE_URL", "rediss://user:hunter2@db:6380/1", f"rediss://user:{MASK}@db:6380/1"),
    ],
)
def test_a_secret_is_masked_and_nothing_else(name, value, expected):
    assert shown(name, value) == expected


def test_a_providers_settings_are_shown_with_its_client_secret_masked():
    settings = Settings.load(
        environ={
            "OIDC_PROVIDERS": "acme",
            "OIDC_ACME_ISSUER": "https://id.acme.example",
            "OIDC_ACME_CLIENT_ID": "token-service",
            "OIDC_ACME_CLIENT_SECRET": SECRET,
        }
    )
    rows = {name: shown(name, text) for name, text in effective_settings(settings)}
    assert rows["OIDC_PROVIDERS"] == "acme"
    assert rows["OIDC_ACME_ISSUER"] == "https://id.acme.example"
    assert rows["OIDC_ACME_CLIENT_SECRET"] == MASK
    assert rows["OIDC_ACME_SCOPES"] == "openid profile email"
    assert SECRET not in str(rows)
