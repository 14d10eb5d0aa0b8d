"""tokens.py on its own: issuing and verifying, without HTTP."""

from __future__ import annotations

import time

import pytest

from app.tokens import (
    InvalidTokenError,
    issue_access_token,
    new_refresh_token,
    role_for,
    verify_access_token,
)
from tests.conftest import make_token, valid_claims

SECRET = "s" * 40


def test_issue_then_verify_round_trips():
    token = issue_access_token("alice", "user", SECRET, 60, now=int(time.time()))
    claims = verify_access_token(token, SECRET)
    assert claims["username"] == "alice"
    assert claims["exp"] - claims["iat"] == 60


def test_verify_returns_only_the_contract_claims():
    token = make_token(SECRET, valid_claims(extra="x"))
    assert set(verify_access_token(token, SECRET)) == {"username", "role", "iat", "exp"}


def test_issued_token_with_past_time_is_expired():
    token = issue_access_token("alice", "user", SECRET, 60, now=int(time.time()) - 60)
    with pytest.raises(InvalidTokenError):
        verify_access_token(token, SECRET)


@pytest.mark.parametrize(
    ("username", "role"), [("admin", "admin"), ("Admin", "user"), ("bob", "user")]
)
def test_role_for(username, role):
    assert role_for(username, "admin") == role


def test_new_refresh_tokens_differ():
    assert len({new_refresh_token() for _ in range(1000)}) == 1000


def test_cached_verification_still_expires_at_exp(monkeypatch):
    now = int(time.time())
    token = make_token(SECRET, valid_claims(iat=now, exp=now + 30))
    assert verify_access_token(token, SECRET)["exp"] == now + 30  # verified, now cached
    monkeypatch.setattr(time, "time", lambda: now + 30.0)  # the second exp names
    with pytest.raises(InvalidTokenError, match="expired"):
        verify_access_token(token, SECRET)


def test_cache_is_keyed_by_secret_and_exact_token():
    token = make_token(SECRET, valid_claims())
    verify_access_token(token, SECRET)
    with pytest.raises(InvalidTokenError):
        verify_access_token(token, "t" * 40)  # same token, another key
    with pytest.raises(InvalidTokenError):
        verify_access_token(token[:-1] + ("A" if token[-1] != "A" else "B"), SECRET)


def test_verified_claims_are_a_fresh_dict_each_time():
    token = make_token(SECRET, valid_claims())
    first = verify_access_token(token, SECRET)
    first["role"] = "admin"
    assert verify_access_token(token, SECRET)["role"] == "user"
