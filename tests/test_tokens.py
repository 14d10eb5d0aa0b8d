"""tokens.py on its own: issuing and verifying, without HTTP."""

from __future__ import annotations

import secrets
import time

import pytest

from app.keys import load_key_ring
from app.tokens import (
    InvalidTokenError,
    issue_access_token,
    new_refresh_token,
    role_for,
    verify_access_token,
)
from tests.conftest import make_token, valid_claims

pytestmark = pytest.mark.signing_algorithms("HS256", "EdDSA")


@pytest.fixture
def keys(signing_key):
    return signing_key.ring


def test_issue_then_verify_round_trips(keys):
    token = issue_access_token("alice", "user", keys, 60, now=int(time.time()))
    claims = verify_access_token(token, keys)
    assert claims["username"] == "alice"
    assert claims["exp"] - claims["iat"] == 60


def test_verify_returns_only_the_contract_claims(keys, signing_key):
    token = make_token(signing_key, valid_claims(extra="x"))
    assert set(verify_access_token(token, keys)) == {"username", "role", "iat", "exp"}


def test_issued_token_with_past_time_is_expired(keys):
    token = issue_access_token("alice", "user", keys, 60, now=int(time.time()) - 60)
    with pytest.raises(InvalidTokenError):
        verify_access_token(token, keys)


@pytest.mark.parametrize(
    ("username", "role"), [("admin", "admin"), ("Admin", "user"), ("bob", "user")]
)
def test_role_for(username, role):
    assert role_for(username, "admin") == role


def test_new_refresh_tokens_differ():
    assert len({new_refresh_token() for _ in range(1000)}) == 1000


def test_cached_verification_still_expires_at_exp(monkeypatch, keys, signing_key):
    now = int(time.time())
    token = make_token(signing_key, valid_claims(iat=now, exp=now + 30))
    assert verify_access_token(token, keys)["exp"] == now + 30  # verified, now cached
    monkeypatch.setattr(time, "time", lambda: now + 30.0)  # the second exp names
    with pytest.raises(InvalidTokenError, match="expired"):
        verify_access_token(token, keys)


def test_cache_is_keyed_by_keys_and_exact_token(keys, signing_key):
    token = make_token(signing_key, valid_claims())
    verify_access_token(token, keys)
    with pytest.raises(InvalidTokenError):
        verify_access_token(token, load_key_ring(secrets.token_urlsafe(48)))  # other keys
    with pytest.raises(InvalidTokenError):
        verify_access_token(token[:-1] + ("A" if token[-1] != "A" else "B"), keys)


def test_verified_claims_are_a_fresh_dict_each_time(keys, signing_key):
    token = make_token(signing_key, valid_claims())
    first = verify_access_token(token, keys)
    first["role"] = "admin"
    assert verify_access_token(token, keys)["role"] == "user"
