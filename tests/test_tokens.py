"""tokens.py on its own: issuing and verifying, without HTTP."""

from __future__ import annotations

import secrets
import time

import pytest

from app.keys import load_key_ring
from app.tokens import (
    REFRESH_TOKEN_ALPHABET,
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


def test_refresh_token_letters_map_random_bytes_and_drop_the_biased_ones(monkeypatch):
    draws = iter([bytes(range(248, 256)) * 8, bytes(range(64))])  # first draw: all rejected
    monkeypatch.setattr("secrets.token_bytes", lambda n: next(draws)[:n])
    assert new_refresh_token() == REFRESH_TOKEN_ALPHABET[:42]
    draws = iter([bytes(range(200, 248)) + bytes(range(248, 256)) * 2])
    # bytes 200..247 are letters (byte % 62); the 16 bytes from 248 are dropped, none folded in
    expected = "".join(REFRESH_TOKEN_ALPHABET[byte % 62] for byte in range(200, 242))
    assert new_refresh_token() == expected


def test_refresh_token_letters_are_uniform():
    # 2000 tokens: 84000 letters, about 1355 of each of the 62; a chi-square this far above
    # its 61 degrees of freedom happens by chance about once in 10^12 runs
    from collections import Counter

    counts = Counter("".join(new_refresh_token() for _ in range(2000)))
    expected = 2000 * 42 / 62
    chi_square = sum(
        (counts[letter] - expected) ** 2 / expected for letter in REFRESH_TOKEN_ALPHABET
    )
    assert set(counts) == set(REFRESH_TOKEN_ALPHABET)
    assert chi_square < 180


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (lambda key: make_token("t" * 40, valid_claims()), "bad_signature"),
        (lambda key: make_token(key, valid_claims(exp=int(time.time()) - 1)), "expired"),
        (lambda key: make_token(key, valid_claims(role="root")), "malformed"),
        (lambda key: make_token("s" * 64, valid_claims(), algorithm="HS512"), "malformed"),
        (lambda key: "not.a.jwt", "malformed"),
    ],
)
@pytest.mark.signing_algorithms("HS256")
def test_a_refused_token_says_why(keys, signing_key, token, reason):
    with pytest.raises(InvalidTokenError) as refused:
        verify_access_token(token(signing_key), keys)
    assert refused.value.reason == reason


def test_a_cached_token_at_exp_is_refused_as_expired(keys, signing_key, monkeypatch):
    now = int(time.time())
    token = make_token(signing_key, valid_claims(iat=now, exp=now + 30))
    verify_access_token(token, keys)
    monkeypatch.setattr(time, "time", lambda: now + 30.0)
    with pytest.raises(InvalidTokenError) as refused:
        verify_access_token(token, keys)
    assert refused.value.reason == "expired"


@pytest.mark.signing_algorithms("HS256")
def test_issued_tokens_verify_with_plain_pyjwt(keys, signing_secret):
    import jwt

    token = issue_access_token("Zoë", "admin", keys, 60)
    assert jwt.decode(token, signing_secret, algorithms=["HS256"])["username"] == "Zoë"
    assert jwt.get_unverified_header(token)["alg"] == "HS256"


@pytest.mark.signing_algorithms("HS256")
def test_a_token_refused_for_its_signature_is_refused_again_without_pyjwt(keys, monkeypatch):
    import jwt

    other = load_key_ring("t" * 40)
    token = make_token("t" * 40, valid_claims())
    with pytest.raises(InvalidTokenError):
        verify_access_token(token, keys)

    def no_decode(*args, **kwargs):
        raise AssertionError("PyJWT was asked again")

    monkeypatch.setattr(jwt, "decode", no_decode)
    with pytest.raises(InvalidTokenError) as refused:
        verify_access_token(token, keys)
    assert refused.value.reason == "bad_signature"
    monkeypatch.undo()
    assert verify_access_token(token, other)["username"] == "alice"  # refused for that ring only


def test_a_token_refused_for_a_moment_is_not_remembered(keys, signing_key, monkeypatch):
    now = int(time.time())
    token = make_token(signing_key, valid_claims(iat=now + 100, exp=now + 160))
    with pytest.raises(InvalidTokenError):
        verify_access_token(token, keys)  # issued in the future, beyond the clock skew
    monkeypatch.setattr(time, "time", lambda: now + 100.0)
    assert verify_access_token(token, keys)["iat"] == now + 100


def test_remembered_refusals_are_bounded(keys):
    from app.tokens import _RefusedTokens

    refused = _RefusedTokens(3)
    for n in range(5):
        refused.add(f"t{n}", keys, "bad_signature")
    assert [refused.reason(f"t{n}", keys) for n in range(5)] == [
        None,
        None,
        "bad_signature",
        "bad_signature",
        "bad_signature",
    ]
