"""tokens.py on its own: issuing and verifying, without HTTP."""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.auth.keys import load_key_ring
from app.auth.tokens import (
    REFRESH_TOKEN_ALPHABET,
    InvalidTokenError,
    issue_access_token,
    issue_cookie_token,
    new_refresh_token,
    role_for,
    verify_access_token,
    verify_cookie_token,
)
from app.config.usernames import USERNAME_PATTERN, token_username_problem
from tests.helpers.clock import ManualClock
from tests.helpers.tokens import header_text, make_token, segment, sign_texts, valid_claims
from tests.helpers.tools import require_tool, which

pytestmark = pytest.mark.signing_algorithms("HS256", "EdDSA", "ES256")


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


def test_cached_verification_still_expires_at_exp(keys, signing_key):
    clock = ManualClock()
    now = int(clock())
    token = make_token(signing_key, valid_claims(iat=now, exp=now + 30))
    assert verify_access_token(token, keys, clock=clock)["exp"] == now + 30  # verified, cached
    clock.advance(30)  # the second exp names
    with pytest.raises(InvalidTokenError, match="expired"):
        verify_access_token(token, keys, clock=clock)


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


def test_a_cached_token_at_exp_is_refused_as_expired(keys, signing_key):
    clock = ManualClock()
    now = int(clock())
    token = make_token(signing_key, valid_claims(iat=now, exp=now + 30))
    verify_access_token(token, keys, clock=clock)
    clock.advance(30)
    with pytest.raises(InvalidTokenError) as refused:
        verify_access_token(token, keys, clock=clock)
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


def test_a_token_refused_for_a_moment_is_not_remembered(keys, signing_key):
    clock = ManualClock()
    now = int(clock())
    token = make_token(signing_key, valid_claims(iat=now + 100, exp=now + 160))
    with pytest.raises(InvalidTokenError):
        verify_access_token(token, keys, clock=clock)  # issued in the future, beyond the skew
    clock.advance(100)
    assert verify_access_token(token, keys, clock=clock)["iat"] == now + 100


def test_remembered_refusals_are_bounded(keys):
    from app.auth.tokens import _RefusedTokens

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


# --- one spelling per token: no base64 padding, no member named twice ----------------


def payload_text(**changes) -> str:
    return json.dumps(valid_claims(**changes), separators=(",", ":"))


@pytest.mark.parametrize("pad", ["s", "p", "h", "hps"])
def test_a_token_with_base64_padding_is_refused(keys, pad):
    key = keys.current
    # texts whose base64 needs padding: one of three lengths does
    payload = next(p for n in range(3) if len(segment(p := payload_text(x="x" * n))) % 4)
    header = next(h for n in range(3) if len(segment(h := header_text(key, x="x" * n))) % 4)
    assert verify_access_token(sign_texts(key, header, payload), keys)  # the control
    token = sign_texts(key, header, payload, pad)
    if "s" in pad and len(token.rpartition(".")[2].rstrip("=")) % 4 == 0:
        pytest.skip("this signature needs no padding")
    assert "=" in token
    with pytest.raises(InvalidTokenError, match="padding"):
        verify_access_token(token, keys)


@pytest.mark.parametrize(
    "payload",
    [
        '{{"username":"alice","role":"user","role":"admin","iat":{iat},"exp":{exp}}}',
        '{{"username":"alice","role":"admin","iat":{iat},"exp":{exp},"role":"user"}}',
        '{{"username":"alice","role":"user","iat":{iat},"exp":{exp},"exp":{exp}}}',
        '{{"username":"alice","role":"user","iat":{iat},"exp":{exp},"x":{{"a":1,"a":2}}}}',
        '{{"username":"alice","role":"user","iat":{iat},"exp":{exp},"x":[{{"a":1}},{{"b":1,"b":1}}]}}',
        '{{"username":"alice","role":"user" , "role" :"user","iat":{iat},"exp":{exp}}}',
    ],
)
def test_a_payload_naming_a_member_twice_is_refused(keys, payload):
    now = int(time.time())
    text = payload.format(iat=now, exp=now + 60)
    with pytest.raises(InvalidTokenError, match="repeats a claim"):
        verify_access_token(sign_texts(keys.current, header_text(keys.current), text), keys)


@pytest.mark.parametrize(
    "header",
    [
        '{{"alg":"{alg}","kid":"{kid}","typ":"JWT","kid":"{kid}"}}',
        '{{"alg":"{alg}","alg":"{alg}","kid":"{kid}","typ":"JWT"}}',
        '{{"alg":"none","kid":"{kid}","typ":"JWT","alg":"{alg}"}}',
        '{{"alg":"{alg}","kid":"{kid}","typ":"JWT","x":{{"a":1,"a":1}}}}',
    ],
)
def test_a_header_naming_a_member_twice_is_refused(keys, header):
    key = keys.current
    text = header.format(alg=key.algorithm, kid=key.kid)
    with pytest.raises(InvalidTokenError, match="names no key"):
        verify_access_token(sign_texts(key, text, payload_text()), keys)


@pytest.mark.parametrize(
    "payload",
    [
        '{{"username":"say \\": twice\\":","role":"user","iat":{iat},"exp":{exp}}}',
        '{{"username" : "alice", "role"\t:"user","iat":{iat},"exp":{exp}}}',
        '{{"username":"alice","role":"user","iat":{iat},"exp":{exp},"x":{{"role":"admin"}}}}',
        '{{"username":"alice","role":"user","iat":{iat},"exp":{exp},"x":[{{"a":1}},{{"a":1}}]}}',
    ],
)
def test_a_payload_with_each_member_once_verifies(keys, payload):
    now = int(time.time())
    text = payload.format(iat=now, exp=now + 60)
    token = sign_texts(keys.current, header_text(keys.current), text)
    assert verify_access_token(token, keys)["role"] == "user"


def test_a_header_the_service_did_not_write_verifies_when_each_member_is_once(keys):
    key = keys.current
    text = json.dumps({"typ": "JWT", "kid": key.kid, "alg": key.algorithm})  # other order
    assert verify_access_token(sign_texts(key, text, payload_text()), keys)["username"] == "alice"


def test_a_cookie_token_naming_a_user_field_twice_is_refused(keys):
    exp = int(time.time()) + 60
    text = f'{{"sub":{{"source":"corp","id":"1","id":"2"}},"exp":{exp}}}'
    token = sign_texts(keys.current, header_text(keys.current), text)
    with pytest.raises(InvalidTokenError, match="repeats a claim"):
        verify_cookie_token(token, keys)
    fine = sign_texts(keys.current, header_text(keys.current), text.replace('"id":"2"', '"x":"2"'))
    assert verify_cookie_token(fine, keys).profile == {"source": "corp", "id": "1"}


def test_a_cookie_token_with_padding_is_refused(keys):
    token = issue_cookie_token({"id": "1"}, keys, 60)
    assert verify_cookie_token(token, keys).profile == {"id": "1"}
    with pytest.raises(InvalidTokenError, match="padding"):
        verify_cookie_token(token + "=" * (-len(token.rpartition(".")[2]) % 4 or 4), keys)


@settings(max_examples=300)
@given(
    st.text(max_size=8)
    | st.sampled_from(
        [" ", "\u00a0\u3000", "a\u2029", "\u2066x", "x\x85", "\ufeff", "\ufeffa", ".", "..", "..."]
    )
)
def test_the_api_documents_username_pattern_is_the_login_rule(name):
    allowed = token_username_problem(name) is None
    assert bool(re.fullmatch(USERNAME_PATTERN, name)) == (allowed and name != "")


def test_an_ecma_262_engine_reads_the_username_pattern_as_the_login_rule():
    # JSON Schema patterns are ECMA-262: what a validator of the API document runs
    node = which("node")
    require_tool(node is not None, "node", "apt-get install nodejs")
    names = [" ", "\u00a0", "\u3000", "\ufeff", "\ufeffa", "\u2028", "a\u2066", ".", "..", "..."]
    names += ["a", "team/ann smith", "\u00e9", "x\x85", "\t", "a b", "\u200b", "\u180e"]
    script = (
        "const [pattern, names] = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "console.log(JSON.stringify(names.map((n) => new RegExp(pattern, 'u').test(n))));"
    )
    answer = subprocess.run(
        [node, "-e", script],
        input=json.dumps([USERNAME_PATTERN, names]),
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert json.loads(answer.stdout) == [token_username_problem(n) is None for n in names]
