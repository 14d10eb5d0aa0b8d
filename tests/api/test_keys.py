"""Signing keys: kids, HS256 rotation, EdDSA and ES256 with a JWKS, and the key files."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import multiprocessing
import os
import secrets
import stat
import subprocess
import sys
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import create_app
from app.auth.key_files import new_private_key_pem, secret_kid, thumbprint
from app.auth.keys import load_key_ring, settings_key_ring
from app.auth.tokens import (
    InvalidTokenError,
    issue_access_token,
    issue_cookie_token,
    verify_access_token,
)
from app.config.parsers import ConfigError
from app.extensions import KEY_RING
from app.instance import load_or_create_key_file
from tests.helpers.apps import load_settings, new_key_file
from tests.helpers.servers import free_port
from tests.helpers.tokens import (
    P256_ORDER,
    bearer,
    ecdsa_twin,
    es256_signature,
    login,
    make_token,
    valid_claims,
    with_es256_signature,
)
from tests.helpers.tools import ROOT

pytestmark = pytest.mark.store("sqlite")  # keys do not depend on the refresh-token store

USER = {"source": "corp", "id": "248289761001", "shownName": "Jane Doe"}
ASYMMETRIC = pytest.mark.parametrize("signing_algorithm", ["EdDSA", "ES256"], indirect=True)


def new_secret() -> str:
    return secrets.token_urlsafe(48)


def status(client, token: str) -> int:
    return client.get("/user-accessible", headers=bearer(token)).status_code


def cookie_status(client, token: str) -> int:
    client.set_cookie("jwt", token)
    return client.get("/api/v1/me").status_code


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hmac_token(secret: bytes, claims: dict, **header) -> str:
    """Sign HS256 by hand with any bytes as the secret, as an attacker would (PyJWT refuses
    a PEM key as an HMAC secret, so it cannot make these tokens)."""
    header = {"alg": "HS256", "typ": "JWT", **header}
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(signature)}"


def write_key(path: Path, key) -> Path:
    """Write a private key, or a public one, as PEM; return the path."""
    if hasattr(key, "private_bytes"):
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    else:
        pem = key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    path.write_bytes(pem)
    return path


# --- Signing: what jwt.encode writes -----------------------------------------------------


ALL_ALGORITHMS = pytest.mark.parametrize(
    "signing_algorithm", ["HS256", "EdDSA", "ES256"], indirect=True
)


@ALL_ALGORITHMS
@pytest.mark.parametrize("username", ["alice", "zoë 😀", 'a\\"b\n'])
def test_a_signed_token_is_what_jwt_encode_writes(signing_key, username):
    key = signing_key.ring.current
    claims = valid_claims(username=username)
    token = key.sign(claims)
    assert signing_key.decode(token) == claims
    assert jwt.get_unverified_header(token) == {
        "alg": signing_key.algorithm, "kid": key.kid, "typ": "JWT"
    }  # fmt: skip
    expected = jwt.encode(claims, key.signing_key, signing_key.algorithm, {"kid": key.kid})
    if username.isascii():  # jwt.encode escapes other characters as \uXXXX: same claims
        # ES256 signatures are randomized: the signed part is the same, and it verifies
        same = 2 if signing_key.algorithm == "ES256" else 3
        assert token.split(".")[:same] == expected.split(".")[:same]


@ALL_ALGORITHMS
def test_a_claim_with_a_lone_surrogate_is_still_signed(signing_key):
    claims = valid_claims(username="a\ud800")  # as a provider's user id may hold one
    assert signing_key.decode(signing_key.ring.current.sign(claims)) == claims


def test_a_public_key_cannot_sign(tmp_path):
    private_file = new_key_file(tmp_path / "key.pem", "EdDSA")
    private = serialization.load_pem_private_key(private_file.read_bytes(), None)
    public_file = write_key(tmp_path / "key.pub.pem", private.public_key())
    ring = load_key_ring(new_secret(), "EdDSA", key_file=str(private_file),
                         previous_key_files=[str(public_file)])  # fmt: skip
    with pytest.raises(RuntimeError, match="public key"):
        ring.previous[0].sign({"iat": 1})


# --- HS256: rotation with SIGNING_SECRET_PREVIOUS --------------------------------------


def test_a_token_of_a_previous_secret_is_accepted(make_app, signing_secret):
    token = login(make_app().test_client())["accessToken"]
    rotated = make_app(SIGNING_SECRET=new_secret(), SIGNING_SECRET_PREVIOUS=signing_secret)
    assert status(rotated.test_client(), token) == 200


def test_new_tokens_are_signed_with_the_current_secret_only(make_app, signing_secret):
    current = new_secret()
    client = make_app(SIGNING_SECRET=current, SIGNING_SECRET_PREVIOUS=signing_secret).test_client()
    tokens = login(client)
    refreshed = client.post("/token", json={"username": "alice", **tokens}).get_json()
    for token in (tokens["accessToken"], refreshed["accessToken"]):
        assert jwt.get_unverified_header(token)["kid"] == secret_kid(current.encode())
        assert jwt.decode(token, current, algorithms=["HS256"])["username"] == "alice"
        with pytest.raises(jwt.InvalidSignatureError):
            jwt.decode(token, signing_secret, algorithms=["HS256"])


def test_a_token_of_a_dropped_secret_is_401_even_once_verified(make_app, signing_secret):
    token = login(make_app().test_client())["accessToken"]
    current = new_secret()
    rotated = make_app(SIGNING_SECRET=current, SIGNING_SECRET_PREVIOUS=signing_secret)
    assert status(rotated.test_client(), token) == 200  # verified, and cached
    dropped = make_app(SIGNING_SECRET=current)
    assert status(dropped.test_client(), token) == 401


def test_several_previous_secrets_each_verify_their_tokens(make_app):
    olds = [new_secret(), new_secret()]
    tokens = [make_token(old, valid_claims(), kid=secret_kid(old.encode())) for old in olds]
    client = make_app(SIGNING_SECRET_PREVIOUS=f"{olds[0]}, {olds[1]}").test_client()
    assert [status(client, token) for token in tokens] == [200, 200]


@pytest.mark.parametrize("kid", ["unknown", "", "a" * 16, 5, None, ["x"]], ids=repr)
def test_a_token_naming_an_unknown_kid_is_401(client, signing_secret, kid):
    assert status(client, hmac_token(signing_secret.encode(), valid_claims(), kid=kid)) == 401


def test_a_token_naming_another_keys_kid_is_401(make_app, signing_secret):
    current = new_secret()
    client = make_app(SIGNING_SECRET=current, SIGNING_SECRET_PREVIOUS=signing_secret).test_client()
    current_kid, previous_kid = secret_kid(current.encode()), secret_kid(signing_secret.encode())
    assert status(client, make_token(current, valid_claims(), kid=current_kid)) == 200
    assert status(client, make_token(signing_secret, valid_claims(), kid=previous_kid)) == 200
    assert status(client, make_token(signing_secret, valid_claims(), kid=current_kid)) == 401
    assert status(client, make_token(current, valid_claims(), kid=previous_kid)) == 401


def test_a_token_without_kid_is_verified_with_the_current_secret_only(make_app, signing_secret):
    current = new_secret()
    client = make_app(SIGNING_SECRET=current, SIGNING_SECRET_PREVIOUS=signing_secret).test_client()
    assert status(client, make_token(current, valid_claims())) == 200  # issued before kids
    assert status(client, make_token(signing_secret, valid_claims())) == 401


def test_a_header_written_another_way_still_names_its_key(make_app, signing_secret):
    current = new_secret()
    client = make_app(SIGNING_SECRET=current, SIGNING_SECRET_PREVIOUS=signing_secret).test_client()
    previous_kid = secret_kid(signing_secret.encode())
    unsorted = {"typ": "JWT", "kid": previous_kid, "x-extra": 1}
    assert status(client, hmac_token(signing_secret.encode(), valid_claims(), **unsorted)) == 200
    assert status(client, hmac_token(current.encode(), valid_claims(), **unsorted)) == 401
    no_kid = {"typ": "JWT", "x-extra": 1}
    assert status(client, hmac_token(current.encode(), valid_claims(), **no_kid)) == 200
    assert status(client, hmac_token(signing_secret.encode(), valid_claims(), **no_kid)) == 401


def test_the_cookie_token_follows_the_same_keys(make_app, signing_secret):
    old_cookie = issue_cookie_token(USER, load_key_ring(signing_secret), 60)
    current = new_secret()
    rotated = make_app(SIGNING_SECRET=current, SIGNING_SECRET_PREVIOUS=signing_secret)
    assert cookie_status(rotated.test_client(), old_cookie) == 200
    assert cookie_status(make_app(SIGNING_SECRET=current).test_client(), old_cookie) == 401
    new_cookie = issue_cookie_token(USER, rotated.extensions[KEY_RING], 60)
    assert jwt.get_unverified_header(new_cookie)["kid"] == secret_kid(current.encode())
    unnamed = make_token(signing_secret, {"sub": USER, "exp": valid_claims()["exp"]})
    assert cookie_status(rotated.test_client(), unnamed) == 401  # no kid: current key only


def test_the_kid_of_a_secret_is_stable_and_shows_nothing_of_it(make_app, signing_secret):
    tokens = [login(make_app().test_client())["accessToken"] for _ in range(2)]
    kids = {jwt.get_unverified_header(token)["kid"] for token in tokens}
    assert kids == {secret_kid(signing_secret.encode())}  # every host derives the same
    kid = kids.pop()
    assert len(kid) == 16
    assert kid != secret_kid(new_secret().encode())
    digests = [hashlib.sha256(signing_secret.encode()).digest()]
    digests.append(hmac.new(signing_secret.encode(), b"kid", hashlib.sha256).digest())
    assert all(b64(digest)[:16] != kid for digest in digests)  # not a plain digest of it


def test_the_hand_made_hs256_token_is_accepted_with_the_right_secret(client, signing_secret):
    # the forging helper of the attacks below is right: only the key it is given fails
    assert status(client, hmac_token(signing_secret.encode(), valid_claims())) == 200


# --- settings of the keys ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{good},short", r"SIGNING_SECRET_PREVIOUS \(secret 2\) must be at least 32 bytes"),
        (
            "change-me-to-48-random-url-safe-characters-from-secrets",
            r"SIGNING_SECRET_PREVIOUS \(secret 1\) is the example value from the project's docs",
        ),
    ],
)
def test_previous_secrets_are_held_to_the_rules_of_the_secret(value, message):
    good = new_secret()
    with pytest.raises(ConfigError, match=message) as caught:
        load_settings({"SIGNING_SECRET_PREVIOUS": value.format(good=good)})
    assert good not in str(caught.value)


def test_secrets_are_left_out_of_the_settings_repr():
    secret, previous = new_secret(), new_secret()
    shown = repr(load_settings({"SIGNING_SECRET": secret, "SIGNING_SECRET_PREVIOUS": previous}))
    assert secret not in shown
    assert previous not in shown


@pytest.mark.parametrize("value", ["RS256", "none", "HS512", "Ed25519", ""])
def test_the_signing_algorithm_is_hs256_eddsa_or_es256(value):
    with pytest.raises(ConfigError, match="SIGNING_ALGORITHM must be HS256, EdDSA, ES256"):
        load_settings({"SIGNING_ALGORITHM": value})


def test_the_signing_algorithm_is_hs256_by_default_and_read_in_any_case(tmp_path):
    assert load_settings().signing_algorithm == "HS256"
    settings = load_settings({"SIGNING_ALGORITHM": "eddsa", "INSTANCE_PATH": str(tmp_path)})
    assert settings.signing_algorithm == "EdDSA"


def test_a_secret_that_is_a_pem_key_refuses_to_start():
    public = ed25519.Ed25519PrivateKey.generate().public_key()
    pem = public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()
    with pytest.raises(ConfigError, match="SIGNING_SECRET looks like a PEM, DER or JSON key"):
        load_settings({"SIGNING_SECRET": pem})


# --- EdDSA and ES256: the JWKS -----------------------------------------------------------


def test_jwks_is_404_with_hs256(client):
    response = client.get("/.well-known/jwks.json")
    assert response.status_code == 404
    assert response.get_json() == client.get("/no/such/path").get_json()


@ASYMMETRIC
def test_jwks_publishes_the_public_key_with_kid_alg_and_use(client, signing_key):
    response = client.get("/.well-known/jwks.json")
    assert response.status_code == 200
    assert response.headers["Cache-Control"] == "public, max-age=300"
    (published,) = response.get_json()["keys"]
    assert published["kid"] == signing_key.kid == thumbprint(published)
    assert published["alg"] == signing_key.algorithm
    assert published["use"] == "sig"
    assert set(published) - {"kid", "alg", "use"} == (
        {"kty", "crv", "x"} if signing_key.algorithm == "EdDSA" else {"kty", "crv", "x", "y"}
    )  # no "d": never a private member
    token = login(client)["accessToken"]
    verifying_key = jwt.PyJWK(published)
    assert jwt.decode(token, verifying_key, algorithms=[published["alg"]])["username"] == "alice"
    again = client.get(
        "/.well-known/jwks.json", headers={"If-None-Match": response.headers["ETag"]}
    )
    assert again.status_code == 304


@ASYMMETRIC
def test_jwks_lists_previous_keys_and_they_verify(make_app, signing_key, tmp_path):
    old_token = login(make_app().test_client())["accessToken"]
    new_file = new_key_file(tmp_path / "new.pem", signing_key.algorithm)
    public_only = write_key(tmp_path / "old.pub.pem", signing_key.ring.current.verifier.key)
    client = make_app(
        SIGNING_KEY_FILE=str(new_file), SIGNING_KEY_FILE_PREVIOUS=str(public_only)
    ).test_client()
    kids = [key["kid"] for key in client.get("/.well-known/jwks.json").get_json()["keys"]]
    new_kid = jwt.get_unverified_header(login(client)["accessToken"])["kid"]
    assert kids == [new_kid, signing_key.kid]
    assert status(client, old_token) == 200
    dropped = make_app(SIGNING_KEY_FILE=str(new_file)).test_client()
    assert status(dropped, old_token) == 401


@ASYMMETRIC
def test_the_jwks_max_age_stays_within_a_rotation_window(make_app):
    client = make_app(ACCESS_TOKEN_LIFETIME="10", COOKIE_TOKEN_LIFETIME="60").test_client()
    assert client.get("/.well-known/jwks.json").headers["Cache-Control"] == "public, max-age=70"


def test_hs256_secrets_still_verify_after_moving_to_eddsa_and_are_never_published(
    make_app, signing_secret, tmp_path
):
    hs256_token = login(make_app().test_client())["accessToken"]
    key_file = new_key_file(tmp_path / "ed.pem", "EdDSA")
    moved = make_app(
        SIGNING_ALGORITHM="EdDSA",
        SIGNING_KEY_FILE=str(key_file),
        SIGNING_SECRET_PREVIOUS=signing_secret,
    ).test_client()
    assert status(moved, hs256_token) == 200
    jwks = moved.get("/.well-known/jwks.json").get_json()
    assert [key["alg"] for key in jwks["keys"]] == ["EdDSA"]
    assert jwt.get_unverified_header(login(moved)["accessToken"])["alg"] == "EdDSA"


# --- EdDSA and ES256: every algorithm confusion is 401 -----------------------------------


def public_forms(public_key) -> dict[str, bytes]:
    """Return the public key in every form an attacker might try as an HMAC secret."""
    pem = public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    if isinstance(public_key, ed25519.Ed25519PublicKey):
        raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    else:
        raw = public_key.public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
    der = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return {"pem": pem, "pem-stripped": pem.strip(), "raw": raw, "der": der}


def forge(attack: str, signing_key, claims: dict) -> str:
    kid = {"kid": signing_key.kid}
    other = "ES256" if signing_key.algorithm == "EdDSA" else "EdDSA"
    if attack.startswith("hs256-"):
        form, _, named = attack.removeprefix("hs256-").rpartition("-")
        if form == "jwk":
            secret = json.dumps(signing_key.ring.jwks["keys"][0]).encode()
        else:
            secret = public_forms(signing_key.public)[form]
        return hmac_token(secret, claims, **(kid if named == "kid" else {}))
    if attack.startswith("none-"):
        header = {"alg": "none", "typ": "JWT", **(kid if attack == "none-kid" else {})}
        return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}."
    if attack == "other-asymmetric-kid":
        attacker = serialization.load_pem_private_key(new_private_key_pem(other), None)
        return jwt.encode(claims, attacker, algorithm=other, headers=kid)
    if attack == "rs256-kid":
        attacker = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        return jwt.encode(claims, attacker, algorithm="RS256", headers=kid)
    raise AssertionError(attack)


ATTACKS = [
    *(f"hs256-{form}-{named}" for form in ("pem", "pem-stripped", "raw", "der", "jwk")
      for named in ("kid", "nokid")),
    "none-kid",
    "none-nokid",
    "other-asymmetric-kid",
    "rs256-kid",
]  # fmt: skip


@ASYMMETRIC
@pytest.mark.parametrize("attack", ATTACKS)
def test_every_algorithm_confusion_is_401(client, signing_key, attack):
    assert status(client, make_token(signing_key, valid_claims())) == 200  # the key is right
    assert status(client, forge(attack, signing_key, valid_claims(role="admin"))) == 401
    cookie = forge(attack, signing_key, {"sub": USER, "exp": valid_claims()["exp"]})
    assert cookie_status(client, cookie) == 401


# --- ES256: one signature per token, its low-S form ---------------------------------------

ES256_ONLY = pytest.mark.parametrize("signing_algorithm", ["ES256"], indirect=True)
#: Tokens signed per kind: were the signer to return either form, all low-S by chance
#: once in 2^300 runs.
SIGNED_SAMPLES = 300


def assert_401(response) -> None:
    assert (response.status_code, response.data) == (401, b"Unauthorized")


@ES256_ONLY
def test_every_es256_token_the_service_signs_is_low_s(client, signing_key):
    ring = signing_key.ring
    signed = [issue_access_token("alice", "user", ring, 60) for _ in range(SIGNED_SAMPLES)]
    signed += [issue_cookie_token(USER, ring, 60) for _ in range(SIGNED_SAMPLES)]
    signed += [login(client)["accessToken"] for _ in range(20)]  # the app's own ring
    for token in signed:
        r, s = es256_signature(token)
        assert 0 < r < P256_ORDER
        assert 0 < s <= P256_ORDER // 2
        assert jwt.PyJWS().decode(token, signing_key.public, ["ES256"])  # PyJWT verifies it


@ES256_ONLY
def test_the_high_s_twin_of_a_live_access_token_is_401_everywhere(make_app, signing_key):
    client = make_app(AUTH_CHECK_COOKIE="on").test_client()
    token = login(client, "admin")["accessToken"]
    twin = ecdsa_twin(token)
    assert twin != token
    assert signing_key.decode(twin) == signing_key.decode(token)  # PyJWT alone takes it
    for _ in range(2):  # the twin is refused before and after the token verified
        for path in ("/user-accessible", "/admin-accessible"):
            assert_401(client.get(path, headers=bearer(twin)))
            assert client.get(path, headers=bearer(token)).status_code == 200
        body = {"guestsCount": 2}
        assert_401(client.post("/restaurant-reservation", json=body, headers=bearer(twin)))
        reservation = client.post("/restaurant-reservation", json=body, headers=bearer(token))
        assert reservation.status_code == 200
        for query in ("", "?role=admin"):
            assert_401(client.get(f"/auth/check{query}", headers=bearer(twin)))
            assert client.get(f"/auth/check{query}", headers=bearer(token)).status_code == 200


def signature_candidates(r0: int, s0: int) -> st.SearchStrategy[tuple[int, int]]:
    """Return (r, s) pairs near a signature's own: its twin, each out of range by n,
    the edges of the low half, and any 256-bit integers."""
    n, top = P256_ORDER, 2**256 - 1
    edges = [0, 1, n // 2, n // 2 + 1, n - 1, n, top]
    rs = [r0, *(value for value in (r0 + n,) if value <= top), *edges]
    ss = [s0, n - s0, *(value for value in (s0 + n, 2 * n - s0) if value <= top), *edges]
    any_integer = st.integers(0, top)
    return st.tuples(
        st.one_of(st.sampled_from(rs), any_integer), st.one_of(st.sampled_from(ss), any_integer)
    )


@ES256_ONLY
@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_an_es256_token_verifies_with_the_signature_its_signer_wrote_only(signing_key, data):
    token = issue_access_token("alice", "user", signing_key.ring, 60)
    r0, s0 = es256_signature(token)
    if data.draw(st.booleans()):
        r, s = data.draw(signature_candidates(r0, s0))
        candidate = with_es256_signature(token, r, s)
    else:  # any bytes at all, of any length
        raw = data.draw(st.binary(max_size=96))
        encoded = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
        candidate = f"{token.rpartition('.')[0]}.{encoded}"
    try:
        verify_access_token(candidate, signing_key.ring)
    except InvalidTokenError:
        assert candidate != token
    else:
        assert candidate == token


# --- key files ---------------------------------------------------------------------------


def _bad_key_files(tmp_path: Path) -> dict[str, tuple[dict[str, str], str]]:
    """Return settings that must stop start-up, each with the message it must give."""
    folder = tmp_path / "keys"
    folder.mkdir()
    ed_private = ed25519.Ed25519PrivateKey.generate()
    p384 = write_key(folder / "p384.pem", ec.generate_private_key(ec.SECP384R1()))
    ed_file = write_key(folder / "ed.pem", ed_private)
    p256_file = new_key_file(folder / "p256.pem", "ES256")
    public = write_key(folder / "ed.pub.pem", ed_private.public_key())
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    rsa_file = write_key(folder / "rsa.pem", rsa_key)
    rsa_public = write_key(folder / "rsa.pub.pem", rsa_key.public_key())
    encrypted = folder / "encrypted.pem"
    encrypted.write_bytes(
        ed_private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        )
    )
    text = folder / "notes.txt"
    text.write_text("this is not a key\n")
    broken = folder / "broken.pem"
    broken.write_text("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n")
    huge = folder / "huge.pem"
    huge.write_bytes(b"-----BEGIN PRIVATE KEY-----\n" + b"A" * 70_000)
    missing = folder / "missing.pem"

    def signing_with(path: Path, algorithm: str = "EdDSA", **more: str) -> dict[str, str]:
        return {"SIGNING_ALGORITHM": algorithm, "SIGNING_KEY_FILE": str(path), **more}

    needs = "SIGNING_ALGORITHM=ES256 needs an EC P-256 private key"
    return {
        "missing": (signing_with(missing), f"SIGNING_KEY_FILE {missing} does not exist"),
        "a folder": (
            signing_with(folder),
            f"SIGNING_KEY_FILE {folder} is a folder, not a key file",
        ),
        "not PEM": (signing_with(text), f"SIGNING_KEY_FILE {text} is not a PEM key file"),
        "broken PEM": (
            signing_with(broken),
            f"SIGNING_KEY_FILE {broken} holds no PEM private or public key",
        ),
        "too large": (
            signing_with(huge),
            f"SIGNING_KEY_FILE {huge} is larger than 65536 bytes",
        ),
        "encrypted": (
            signing_with(encrypted),
            f"SIGNING_KEY_FILE {encrypted} is encrypted; give the key without a passphrase",
        ),
        "public key": (
            signing_with(public),
            f"SIGNING_KEY_FILE {public} holds a public key; it must hold the private key",
        ),
        "P-384 for ES256": (
            signing_with(p384, "ES256"),
            f"SIGNING_KEY_FILE {p384} holds an EC secp384r1 private key; {needs}",
        ),
        "Ed25519 for ES256": (
            signing_with(ed_file, "ES256"),
            f"SIGNING_KEY_FILE {ed_file} holds an Ed25519 private key; {needs}",
        ),
        "P-256 for EdDSA": (
            signing_with(p256_file),
            f"SIGNING_KEY_FILE {p256_file} holds an EC P-256 private key;"
            " SIGNING_ALGORITHM=EdDSA needs an Ed25519 private key",
        ),
        "RSA for EdDSA": (
            signing_with(rsa_file),
            f"SIGNING_KEY_FILE {rsa_file} holds an RSA private key",
        ),
        "previous missing": (
            signing_with(ed_file, SIGNING_KEY_FILE_PREVIOUS=str(missing)),
            f"SIGNING_KEY_FILE_PREVIOUS {missing} does not exist",
        ),
        "previous RSA": (
            signing_with(ed_file, SIGNING_KEY_FILE_PREVIOUS=f"{p256_file},{rsa_public}"),
            f"SIGNING_KEY_FILE_PREVIOUS {rsa_public} holds an RSA public key; a signing key"
            " is Ed25519 (EdDSA) or EC P-256 (ES256)",
        ),
        "key file with HS256": (
            {"SIGNING_KEY_FILE": str(ed_file)},
            "SIGNING_KEY_FILE is for SIGNING_ALGORITHM=EdDSA or ES256 (it is HS256)",
        ),
        "previous key file with HS256": (
            {"SIGNING_KEY_FILE_PREVIOUS": str(ed_file)},
            "SIGNING_KEY_FILE_PREVIOUS is for SIGNING_ALGORITHM=EdDSA or ES256",
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing", "a folder", "not PEM", "broken PEM", "too large", "encrypted", "public key",
        "P-384 for ES256", "Ed25519 for ES256", "P-256 for EdDSA", "RSA for EdDSA",
        "previous missing", "previous RSA", "key file with HS256", "previous key file with HS256",
    ],
)  # fmt: skip
def test_a_bad_key_file_refuses_to_start_in_one_line(tmp_path, case):
    settings, message = _bad_key_files(tmp_path)[case]
    with pytest.raises(ConfigError) as caught:
        load_settings({**settings, "INSTANCE_PATH": str(tmp_path / "instance")})
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_an_unreadable_key_file_refuses_to_start(tmp_path, monkeypatch):
    key_file = new_key_file(tmp_path / "key.pem", "EdDSA")

    def denied(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr("app.auth.key_files.open", denied, raising=False)  # root may read anything
    with pytest.raises(ConfigError, match=f"SIGNING_KEY_FILE {key_file} cannot be read: Perm"):
        load_settings({"SIGNING_ALGORITHM": "EdDSA", "SIGNING_KEY_FILE": str(key_file)})


@pytest.mark.processes
@pytest.mark.parametrize(
    "case",
    ["missing", "not PEM", "encrypted", "public key", "P-384 for ES256", "previous missing",
     "key file with HS256"],
)  # fmt: skip
@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["-m", "gunicorn", "-c", "gunicorn.conf.py", "wsgi:app"], id="gunicorn"),
        pytest.param(["-m", "flask", "--app", "wsgi", "keys", "show"], id="flask"),
    ],
)
def test_a_bad_key_file_is_one_line_and_exit_status_1(tmp_path, case, command):
    settings, message = _bad_key_files(tmp_path)[case]
    env = {
        "PATH": os.environ["PATH"],
        "HOST": "127.0.0.1",
        "PORT": str(free_port()),
        "INSTANCE_PATH": str(tmp_path / "instance"),
        **settings,
    }
    result = subprocess.run(
        [sys.executable, *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"configuration error: {message}")


@ASYMMETRIC
def test_the_key_is_generated_once_into_the_instance_folder(tmp_path, signing_algorithm):
    instance = tmp_path / "fresh-instance"
    settings = {"INSTANCE_PATH": str(instance), "SIGNING_ALGORITHM": signing_algorithm}
    first = create_app(settings).config["SETTINGS"]
    key_file = Path(first.signing_key_file)
    assert key_file.parent == instance
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert serialization.load_pem_private_key(key_file.read_bytes(), None)
    again = create_app(settings).config["SETTINGS"]
    assert settings_key_ring(again).current.kid == settings_key_ring(first).current.kid
    assert [path.name for path in instance.iterdir() if path.name.endswith(".tmp")] == []


def _load_settings(instance: str, queue) -> None:
    settings = load_settings({"INSTANCE_PATH": instance, "SIGNING_ALGORITHM": "EdDSA"})
    queue.put(settings_key_ring(settings).current.kid)


def test_processes_starting_together_agree_on_one_key(tmp_path):
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    processes = [
        context.Process(target=_load_settings, args=(str(tmp_path), queue)) for _ in range(12)
    ]
    for process in processes:
        process.start()
    kids = {queue.get(timeout=30) for _ in processes}
    for process in processes:
        process.join(30)
    assert len(kids) == 1
    key_file = load_or_create_key_file(str(tmp_path), "EdDSA")
    assert load_key_ring("x" * 32, "EdDSA", key_file=key_file).current.kid == kids.pop()
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "signing_key_eddsa.pem",
        "signing_secret",
    ]  # no temporary candidate left behind


@pytest.mark.processes
def test_gunicorn_config_creates_the_key_in_the_master_before_the_workers(tmp_path):
    env = {
        "PATH": os.environ["PATH"],
        "INSTANCE_PATH": str(tmp_path / "instance"),
        "SIGNING_ALGORITHM": "ES256",
    }
    command = [sys.executable, "-c", "import runpy; runpy.run_path('gunicorn.conf.py')"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    key_file = tmp_path / "instance" / "signing_key_es256.pem"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


# --- flask keys ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("configured", "option", "curve_check"),
    [
        (None, [], lambda key: isinstance(key, ed25519.Ed25519PrivateKey)),
        (None, ["--algorithm", "ES256"], lambda key: isinstance(key.curve, ec.SECP256R1)),
        ("ES256", [], lambda key: isinstance(key.curve, ec.SECP256R1)),
        ("EdDSA", [], lambda key: isinstance(key, ed25519.Ed25519PrivateKey)),
    ],
)
def test_flask_keys_generate_writes_a_private_key_and_prints_its_kid(
    make_app, tmp_path, configured, option, curve_check
):
    app = make_app(**({"SIGNING_ALGORITHM": configured} if configured else {}))
    path = tmp_path / "new-key.pem"
    result = app.test_cli_runner().invoke(args=["keys", "generate", str(path), *option])
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    key = serialization.load_pem_private_key(path.read_bytes(), None)
    assert curve_check(key)
    algorithm = "ES256" if isinstance(key, ec.EllipticCurvePrivateKey) else "EdDSA"
    assert (
        result.output == load_key_ring("x" * 32, algorithm, key_file=str(path)).current.kid + "\n"
    )
    # the file is one the service signs with, under the kid printed
    client = make_app(SIGNING_ALGORITHM=algorithm, SIGNING_KEY_FILE=str(path)).test_client()
    assert jwt.get_unverified_header(login(client)["accessToken"])["kid"] == result.output.strip()


def test_flask_keys_generate_never_overwrites_a_file(runner, tmp_path):
    (tmp_path / "keys").mkdir()
    path = tmp_path / "keys" / "key.pem"
    path.write_text("an operator's file\n")
    result = runner.invoke(args=["keys", "generate", str(path)])
    assert result.exit_code == 1
    assert f"{path} exists; a key file is never overwritten" in result.output
    assert path.read_text() == "an operator's file\n"
    assert [item.name for item in path.parent.iterdir()] == ["key.pem"]  # no candidate left


def test_flask_keys_show_prints_kids_and_algorithms_never_a_secret(make_app, signing_secret):
    previous = new_secret()
    app = make_app(SIGNING_SECRET_PREVIOUS=previous)
    result = app.test_cli_runner().invoke(args=["keys", "show"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"current   HS256  {secret_kid(signing_secret.encode())}  SIGNING_SECRET",
        f"previous  HS256  {secret_kid(previous.encode())}  SIGNING_SECRET_PREVIOUS (secret 1)",
    ]


def test_flask_keys_show_lists_the_key_files_never_a_private_key(make_app, tmp_path):
    current = new_key_file(tmp_path / "current.pem", "ES256")
    old = new_key_file(tmp_path / "old.pem", "EdDSA")
    app = make_app(
        SIGNING_ALGORITHM="ES256", SIGNING_KEY_FILE=str(current), SIGNING_KEY_FILE_PREVIOUS=str(old)
    )
    result = app.test_cli_runner().invoke(args=["keys", "show"])
    assert result.exit_code == 0, result.output
    ring = app.extensions[KEY_RING]
    assert result.output.splitlines() == [
        f"current   ES256  {ring.current.kid}  SIGNING_KEY_FILE {current}",
        f"previous  EdDSA  {ring.previous[0].kid}  SIGNING_KEY_FILE_PREVIOUS {old}",
    ]
    assert "PRIVATE" not in result.output
    for path in (current, old):
        assert "".join(path.read_text().splitlines()[1:-1]) not in result.output
