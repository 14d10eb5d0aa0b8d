"""The clients' file (CLIENTS_FILE): what it holds, what it refuses, and its reload."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.config import parsers as parse
from app.config.parsers import AUDIENCE, ConfigError
from app.oauth.clients import (
    RELOAD_INTERVAL,
    ClientRegistry,
    ClientsFileError,
    client_id_problem,
    new_client_secret,
    parse_clients,
    read_clients_file,
    secret_digest,
)
from tests.helpers.clock import ManualClock
from tests.helpers.oauth import register

DIGEST = "0" * 64


def test_a_secret_is_256_random_bits_stored_as_its_sha256():
    secret = new_client_secret()
    assert len(secret) == 43
    assert secret != new_client_secret()
    assert len(secret_digest(secret)) == 64


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ("[]", "one JSON object"),
        ('{"a:b": {}}', "bad client id"),
        ('{"svc": 1}', "not an object"),
        ('{"svc": {"role": "user"}}', "no secret_sha256"),
        (f'{{"svc": {{"secret_sha256": "{"A" * 64}", "role": "user"}}}}', "no secret"),
        (f'{{"svc": {{"secret_sha256": "{DIGEST}", "role": "root"}}}}', "not admin or user"),
        (
            f'{{"svc": {{"secret_sha256": "{DIGEST}", "role": "user", "audiences": "a"}}}}',
            "audiences",
        ),
        (
            f'{{"svc": {{"secret_sha256": "{DIGEST}", "role": "user", "audiences": ["a b"]}}}}',
            "audiences",
        ),
    ],
)
def test_a_broken_file_is_refused_saying_why(text, message):
    with pytest.raises(ClientsFileError, match=message):
        parse_clients(text, "clients.json")


@pytest.mark.parametrize("client_id", ["", "-x", "a:b", "a b", "é", "x" * 65])
def test_a_client_id_is_a_safe_short_name(client_id):
    assert client_id_problem(client_id) is not None


def test_a_file_not_utf8_or_unreadable_is_refused(tmp_path):
    path = tmp_path / "clients.json"
    path.write_bytes(b"\xff")
    with pytest.raises(ClientsFileError, match="not UTF-8"):
        read_clients_file(str(path))
    with pytest.raises(ClientsFileError, match="cannot be read"):
        read_clients_file(str(tmp_path))


def test_the_registry_reads_changes_within_a_second_and_keeps_the_last_good_file(tmp_path):
    path = tmp_path / "clients.json"
    clock = ManualClock()
    registry = ClientRegistry(str(path), clock=clock)
    assert registry.get("svc") is None  # no file yet: no clients
    secret = register(path, "svc")
    assert registry.authenticate("svc", secret) is None  # not looked at again yet
    clock.advance(RELOAD_INTERVAL)
    assert registry.authenticate("svc", secret).username == "client:svc"
    assert registry.authenticate("svc", secret + "x") is None
    assert registry.authenticate("svc", "x" * 1000) is None
    assert registry.authenticate("nobody", secret) is None
    path.write_text(json.dumps({"svc": "broken"}))
    clock.advance(RELOAD_INTERVAL)
    assert registry.authenticate("svc", secret) is not None  # the file read before stays


@given(st.text(max_size=60))
@settings(max_examples=200)
def test_token_audience_parses_any_text_or_refuses_it_in_one_line(text):
    try:
        audiences = parse.audiences("TOKEN_AUDIENCE", text)
    except ConfigError as error:
        message = str(error)
    else:
        assert all(AUDIENCE.fullmatch(audience) for audience in audiences)
        assert len(set(audiences)) == len(audiences)
        return
    assert "\n" not in message


@given(st.text(max_size=60))
@settings(max_examples=200)
def test_token_issuer_parses_any_text_or_refuses_it(text):
    try:
        issuer = parse.issuer("TOKEN_ISSUER", text)
    except ConfigError:
        return
    assert issuer == text
    assert "?" not in issuer
    assert "#" not in issuer


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("https://user:pw@auth.example.com", "no user or password"),
        ("https://user@auth.example.com", "no user or password"),
        ("https://auth.example.com/a b", "RFC 3986's characters"),
        ("https://auth.example.com/\u00e9", "RFC 3986's characters"),
        ("https://auth.example.com/a\tb", "RFC 3986's characters"),
    ],
)
def test_token_issuer_refuses_credentials_and_characters_no_url_holds(text, message):
    with pytest.raises(ConfigError, match=message):
        parse.issuer("TOKEN_ISSUER", text)


@pytest.mark.parametrize(
    "text",
    ["https://auth.example.com", "https://auth.example.com/tenant%20one/x", "http://[::1]:8000"],
)
def test_token_issuer_takes_urls_as_written(text):
    assert parse.issuer("TOKEN_ISSUER", text) == text
