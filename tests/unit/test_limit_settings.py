"""The limits' settings: RATE_LIMIT_AUTH and RATE_LIMIT_EXEMPT (per address) and
LOGIN_FAILURE_LIMIT (per username), read in Flask-Limiter's notation or refused in one line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from app.config.parsers import ConfigError
from app.config.settings import DEFAULT_LOGIN_FAILURE_LIMIT, DEFAULT_RATE_LIMIT_AUTH, Settings
from tests.helpers.tools import ROOT


@pytest.mark.parametrize(
    ("value", "limits"),
    [
        ("20 per second; 600 per minute", [(20, 1), (600, 60)]),
        ("100 per minute; 5 per second", [(5, 1), (100, 60)]),  # shortest window first
        ("10/second", [(10, 1)]),
        ("3 per 2 minutes", [(3, 120)]),
        (" 1 per hour ", [(1, 3600)]),
        ("5 per minute; 5 per 60 seconds", [(5, 60)]),  # one counter, not two
    ],
)
def test_rate_limit_auth_reads_flask_limiters_notation(tmp_path, value, limits):
    settings = Settings.load({"RATE_LIMIT_AUTH": value, "INSTANCE_PATH": str(tmp_path)})
    assert [(item.amount, item.get_expiry()) for item in settings.rate_limit_auth] == limits


def test_the_default_limit_is_20_per_second_and_600_per_minute(tmp_path):
    settings = Settings.load({"INSTANCE_PATH": str(tmp_path)})
    assert DEFAULT_RATE_LIMIT_AUTH == "20 per second; 600 per minute"
    assert [(item.amount, item.get_expiry()) for item in settings.rate_limit_auth] == [
        (20, 1),
        (600, 60),
    ]
    assert [str(network) for network in settings.rate_limit_exempt] == ["127.0.0.0/8", "::1/128"]


@pytest.mark.parametrize("value", ["off", "OFF", " off "])
def test_rate_limit_auth_off_is_no_limit(tmp_path, value):
    settings = Settings.load({"RATE_LIMIT_AUTH": value, "INSTANCE_PATH": str(tmp_path)})
    assert settings.rate_limit_auth == ()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "RATE_LIMIT_AUTH must be rate limits"),
        ("lots", "RATE_LIMIT_AUTH must be rate limits"),
        ("5 per fortnight", "RATE_LIMIT_AUTH must be rate limits"),
        ("5 per second;; 6", "RATE_LIMIT_AUTH must be rate limits"),
        ("0 per second", "a limit must allow at least 1 request"),
        ("5 per 0 seconds", "a window must be at least 1"),
        ("5/0 minutes", "a window must be at least 1"),
    ],
)
def test_a_bad_rate_limit_refuses_to_start(tmp_path, value, message):
    with pytest.raises(ConfigError, match=message):
        Settings.load({"RATE_LIMIT_AUTH": value, "INSTANCE_PATH": str(tmp_path)})


@pytest.mark.processes
def test_a_bad_rate_limit_stops_gunicorn_in_one_line(tmp_path):
    env = {"PATH": os.environ["PATH"], "RATE_LIMIT_AUTH": "many", "INSTANCE_PATH": str(tmp_path)}
    command = [sys.executable, "-c", "import runpy; runpy.run_path('gunicorn.conf.py')"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "configuration error: RATE_LIMIT_AUTH must be rate limits, e.g. '20 per second;"
        " 600 per minute', or off; got 'many'"
    ]


@pytest.mark.parametrize("value", ["10.0.0.0/33", "localhost", "10.0.0.1/8"])
def test_a_bad_exempt_network_refuses_to_start(tmp_path, value):
    with pytest.raises(ConfigError, match="RATE_LIMIT_EXEMPT must be comma-separated"):
        Settings.load({"RATE_LIMIT_EXEMPT": value, "INSTANCE_PATH": str(tmp_path)})


def test_the_default_is_10_failures_a_minute(tmp_path):
    settings = Settings.load({"INSTANCE_PATH": str(tmp_path)})
    assert DEFAULT_LOGIN_FAILURE_LIMIT == "10 per minute"
    assert [(i.amount, i.get_expiry()) for i in settings.login_failure_limit] == [(10, 60)]


@pytest.mark.parametrize(
    ("value", "limits"), [("3 per minute; 20 per hour", [(3, 60), (20, 3600)]), ("off", [])]
)
def test_login_failure_limit_reads_the_rate_limits_notation(tmp_path, value, limits):
    settings = Settings.load({"LOGIN_FAILURE_LIMIT": value, "INSTANCE_PATH": str(tmp_path)})
    assert [(i.amount, i.get_expiry()) for i in settings.login_failure_limit] == limits


@pytest.mark.parametrize("value", ["lots", "0 per minute", "5 per 0 seconds"])
def test_a_bad_login_failure_limit_refuses_to_start(tmp_path, value):
    with pytest.raises(ConfigError, match="LOGIN_FAILURE_LIMIT"):
        Settings.load({"LOGIN_FAILURE_LIMIT": value, "INSTANCE_PATH": str(tmp_path)})
