"""CONFIG_FILE: a TOML file of settings, below the environment, checked as the environment is."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.config.config_file import MASK, mask_url_password, shown_key
from app.config.names import PROVIDER_SETTING
from app.config.parsers import ConfigError
from app.config.settings import Settings, setting_names
from tests.helpers.tools import ROOT

SECRET = "kq3Vn8ZxT2wLr5Yb7Hc9Jd1Mf4Pg6Rs0Ut2Wv4Xy6Za8"
SECRET_LOOKING_KEYS = ["SIGNING_SECRET", "SIGNING_SECRET_PREVIOUS", "OIDC_ACME_CLIENT_SECRET"]
SAMPLE = ROOT / "deploy" / "systemd" / "config.toml"
FUNCTION_FIXTURE = [HealthCheck.function_scoped_fixture]


def toml_string(text: str) -> str:
    """Return ``text`` as a TOML basic string, every control character escaped."""
    escaped = "".join(
        f"\\u{ord(char):04x}" if char in '"\\' or ord(char) < 0x20 or ord(char) == 0x7F else char
        for char in text
    )
    return f'"{escaped}"'


def write(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def load(path: Path, **environ: str) -> Settings:
    return Settings.load(environ={"CONFIG_FILE": str(path), **environ})


def refusal(path: Path, **environ: str) -> str:
    with pytest.raises(ConfigError) as raised:
        load(path, **environ)
    message = str(raised.value)
    assert "\n" not in message
    return message


# Each setting's TOML form in the file and the text of its variable: the same settings.
NATURAL_TYPES = [
    ("PORT = 9001", "PORT", "9001"),
    ("METRICS = false", "METRICS", "false"),
    ("AUTH_COOKIE_SECURE = true", "AUTH_COOKIE_SECURE", "true"),
    ("TOKEN_STORE_TIMEOUT = 0.5", "TOKEN_STORE_TIMEOUT", "0.5"),
    ("TOKEN_STORE_TIMEOUT = 3", "TOKEN_STORE_TIMEOUT", "3"),
    ('TRUSTED_PROXIES = ["127.0.0.1/32", "::1"]', "TRUSTED_PROXIES", "127.0.0.1/32,::1"),
    ("METRICS_ALLOW = []", "METRICS_ALLOW", ""),
    (
        'RATE_LIMIT_AUTH = ["5 per second", "100 per minute"]',
        "RATE_LIMIT_AUTH",
        "5 per second; 100 per minute",
    ),
    ('LOG_LEVEL = "debug"', "LOG_LEVEL", "debug"),
    ('PORT = "9002"', "PORT", "9002"),
    ('TOKEN_AUDIENCE = ["api", "https://b.example"]', "TOKEN_AUDIENCE", "api,https://b.example"),
]


@pytest.mark.parametrize(("line", "name", "text"), NATURAL_TYPES)
def test_a_toml_value_means_what_its_variable_text_means(tmp_path, line, name, text):
    extra = {  # what the setting needs beside it to start
        "TOKEN_AUDIENCE": {"TOKEN_ISSUER": "https://issuer.example"},
        "TRUSTED_PROXIES": {"OPEN_LOGIN": "true"},
    }.get(name, {})
    path = write(tmp_path / "c.toml", line + "\n")
    from_file = load(path, **extra)
    from_environment = Settings.load(environ={name: text, **extra})
    assert from_file == replace(from_environment, config_file=str(path))


def test_the_environment_wins_over_the_file_and_the_file_over_the_default(tmp_path):
    path = write(tmp_path / "c.toml", "PORT = 9001\nLOG_LEVEL = 'WARNING'\n")
    loaded = load(path, PORT="9002")
    assert loaded.port == 9002
    assert loaded.log_level == "WARNING"
    assert loaded.access_token_lifetime == 60
    _, origins, _ = Settings.gather(environ={"CONFIG_FILE": str(path), "PORT": "9002"})
    assert origins["PORT"] == "environment"
    assert origins["LOG_LEVEL"] == "file"
    assert "ACCESS_TOKEN_LIFETIME" not in origins


def test_an_override_wins_over_the_file(tmp_path):
    path = write(tmp_path / "c.toml", "PORT = 9001\n")
    assert Settings.load({"PORT": "9003", "CONFIG_FILE": str(path)}, environ={}).port == 9003


def test_a_provider_is_read_from_the_file(tmp_path):
    path = write(
        tmp_path / "c.toml",
        "OIDC_PROVIDERS = ['acme']\n"
        "OIDC_ACME_ISSUER = 'https://id.acme.example'\n"
        "OIDC_ACME_CLIENT_ID = 'token-service'\n"
        f"OIDC_ACME_CLIENT_SECRET = '{SECRET}'\n",
    )
    (provider,) = load(path).identity_providers
    assert (provider.issuer, provider.client_secret) == ("https://id.acme.example", SECRET)


def test_the_shipped_file_is_one_the_service_starts_with(tmp_path):
    path = write(tmp_path / "c.toml", SAMPLE.read_text(), 0o644)
    assert load(path).config_file == str(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SIGNING_SECERT = 'x'", "SIGNING_SECERT is not a setting: did you mean SIGNING_SECRET?"),
        ("port = 9000", "port is not a setting: did you mean PORT?"),
        ("TOKEN_STORE_TIMOUT = 2", "TOKEN_STORE_TIMOUT is not a setting: did you mean"),
        ("FAVOURITE_COLOUR = 'blue'", "FAVOURITE_COLOUR is not a setting"),
        ("'log level' = 'INFO'", "'log level' is not a setting: did you mean LOG_LEVEL?"),
        ('"a\\nb" = 1', "'a\\nb' is not a setting"),
        ("CONFIG_FILE = '/etc/other.toml'", "CONFIG_FILE is read from the environment only"),
        ("PORT = 70000", "PORT must be between 1 and 65535, got 70000"),
        ("PORT = true", "PORT must be a whole number or a string, got a boolean"),
        ("PORT = 80.0", "PORT must be a whole number or a string, got a number"),
        ("METRICS = 1", "METRICS must be a boolean or a string, got a whole number"),
        ("LOG_LEVEL = ['INFO']", "LOG_LEVEL must be a string, got an array"),
        ("LOG_LEVEL = 1979-05-27", "LOG_LEVEL must be a string, got a date or time"),
        ("[LOG_LEVEL]\nx = 1", "LOG_LEVEL must be a string, got a table"),
        ("TRUSTED_PROXIES = [['10.0.0.1']]", "TRUSTED_PROXIES must be an array of strings"),
        ("TRUSTED_PROXIES = ['10.0.0.1,10.0.0.2']", "TRUSTED_PROXIES: an item holds a comma"),
        ("HOST = 'not a host!'", "HOST must be an IP address or a host name"),
    ],
)
def test_a_bad_key_or_value_names_the_file_and_the_key(tmp_path, text, message):
    path = write(tmp_path / "c.toml", text + "\n")
    assert refusal(path).startswith(f"CONFIG_FILE {path}: {message}")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda path: path, "cannot read it: No such file or directory"),
        (lambda path: (path.mkdir(), path)[1], "is not a regular file"),
        (lambda path: write(path, "PORT = \n"), "is not valid TOML: Invalid value (at line 1"),
        (lambda path: (path.write_bytes(b"PORT = '\xff'\n"), path)[1], "is not UTF-8 text"),
    ],
    ids=["missing", "a folder", "not TOML", "not UTF-8"],
)
def test_a_file_that_cannot_be_read_stops_the_start_naming_it(tmp_path, make, message):
    path = make(tmp_path / "c.toml")
    assert refusal(path).startswith(f"CONFIG_FILE {path}")
    assert message in refusal(path)


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    path = tmp_path / "c.toml"
    os.mkfifo(path)
    outcome: list[str] = []
    reader = threading.Thread(target=lambda: outcome.append(refusal(path)), daemon=True)
    reader.start()
    reader.join(5)
    assert outcome == [f"CONFIG_FILE {path} is not a regular file"]


def test_a_relative_path_is_refused():
    with pytest.raises(ConfigError, match="CONFIG_FILE must be an absolute path"):
        Settings.load(environ={"CONFIG_FILE": "config.toml"})


def test_a_misspelled_config_file_variable_is_caught_like_any_other():
    with pytest.raises(
        ConfigError, match="CONFIG_FILES is not a setting: did you mean CONFIG_FILE"
    ):
        Settings.load(environ={"CONFIG_FILES": "/etc/token-service/config.toml"})


@pytest.mark.parametrize("mode", [0o602, 0o666, 0o646])
def test_a_file_others_may_write_is_refused(tmp_path, mode):
    path = write(tmp_path / "c.toml", "PORT = 9001\n", mode)
    assert refusal(path) == (
        f"CONFIG_FILE {path} may be changed by any user (mode {mode:04o}): chmod o-w {path}"
    )


@pytest.mark.parametrize(
    "line",
    [
        f"SIGNING_SECRET = '{SECRET}'",
        f"SIGNING_SECRET_PREVIOUS = ['{SECRET}']",
        "TOKEN_STORE_URL = 'redis://:hunter2hunter2@127.0.0.1:6379/0'",
        "TOKEN_STORE_URL = 'postgresql://svc@db.internal/tokens?password=hunter2hunter2'",
    ],
)
def test_a_secret_in_a_file_others_may_read_is_refused_and_never_shown(tmp_path, line):
    path = write(tmp_path / "c.toml", line + "\n", 0o644)
    message = refusal(path)
    assert message.startswith(f"CONFIG_FILE {path} holds the secret ")
    assert f"chmod o-r {path}" in message
    assert SECRET not in message
    assert "hunter2" not in message
    # readable by its owner and group only, the same file is read
    path.chmod(0o640)
    assert load(path).config_file == str(path)


def test_a_provider_client_secret_in_a_file_others_may_read_is_refused(tmp_path):
    path = write(tmp_path / "c.toml", f"OIDC_ACME_CLIENT_SECRET = '{SECRET}'\n", 0o604)
    assert "holds the secret OIDC_ACME_CLIENT_SECRET" in refusal(path)


def test_a_file_without_secrets_may_be_read_by_all(tmp_path):
    text = "PORT = 9001\nTOKEN_STORE_URL = 'redis://127.0.0.1:6379/0'\n"
    assert load(write(tmp_path / "c.toml", text, 0o644)).port == 9001


@pytest.mark.processes
def test_gunicorn_stops_with_the_one_line_error_of_a_bad_key(tmp_path):
    path = write(tmp_path / "c.toml", "SIGNING_SECERT = 'x'\n")
    env = {"PATH": os.environ["PATH"], "CONFIG_FILE": str(path)}
    command = [sys.executable, "-c", "import runpy; runpy.run_path('gunicorn.conf.py')"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr == (
        f"configuration error: CONFIG_FILE {path}: SIGNING_SECERT is not a setting:"
        " did you mean SIGNING_SECRET?\n"
    )


# Keys: TOML bare keys, and quoted keys of any text.
KEYS = st.from_regex(r"[A-Za-z0-9_-]{1,40}", fullmatch=True) | st.text(min_size=1, max_size=40)


@settings(suppress_health_check=FUNCTION_FIXTURE, deadline=None)
@given(key=KEYS)
def test_any_key_that_is_no_setting_is_refused_naming_the_file_and_the_key(tmp_path, key):
    if key in setting_names() or PROVIDER_SETTING.fullmatch(key):
        return
    path = write(tmp_path / "c.toml", f"{toml_string(key)} = 'x'\n")
    message = refusal(path)
    assert message.startswith(f"CONFIG_FILE {path}: ")
    if key == "CONFIG_FILE":
        return
    assert f": {shown_key(key)} is not a setting" in message


SETTINGS_BUT_PROVIDERS = sorted(setting_names() - {"OIDC_PROVIDERS", "CONFIG_FILE"})
VALUES = (
    st.text(max_size=60)
    | st.integers()
    | st.floats()
    | st.booleans()
    | st.lists(st.text(max_size=20) | st.integers(), max_size=3)
)


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(repr(value), repr(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    return toml_string(str(value))


@settings(suppress_health_check=FUNCTION_FIXTURE, deadline=None, max_examples=300)
@given(name=st.sampled_from(SETTINGS_BUT_PROVIDERS), value=VALUES)
def test_any_value_starts_the_service_or_stops_it_in_one_line_naming_the_key(tmp_path, name, value):
    path = write(tmp_path / "c.toml", f"{name} = {toml_value(value)}\n")
    try:
        load(path, INSTANCE_PATH=str(tmp_path))
    except ConfigError as error:
        message = str(error)
        assert "\n" not in message
        assert name in message


@settings(max_examples=200)
@given(
    password=st.text(
        st.characters(codec="ascii", exclude_characters="\0"), min_size=8, max_size=40
    ).filter(lambda text: text.strip() and not text.isdigit()),
    scheme=st.sampled_from(["redis", "rediss", "postgresql", "postgres"]),
    in_query=st.sampled_from([None, "password", "sslpassword"]),
)
def test_a_store_url_password_is_always_masked(password, scheme, in_query):
    encoded = quote(password, safe="")
    if in_query:  # libpq's password, or the one of the client key (sslpassword)
        url = f"{scheme}://svc@db.internal:5432/tokens?sslmode=require&{in_query}={{}}"
    else:
        url = f"{scheme}://svc:{{}}@db.internal:5432/tokens"
    # exactly the URL with the mask in the password's place: a password made of stars, or
    # of the URL's own words, cannot hide a leak
    assert mask_url_password(url.format(encoded)) == url.format(MASK)


def test_the_documented_example_is_a_file_the_service_starts_with(tmp_path):
    page = (ROOT / "docs" / "configuration.md").read_text()
    (example,) = re.findall(r"```toml\n(.*?)```", page, re.S)
    loaded = load(write(tmp_path / "c.toml", example, 0o644))
    assert (loaded.port, loaded.web_concurrency, len(loaded.rate_limit_auth)) == (8080, 2, 2)
