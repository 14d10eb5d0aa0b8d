"""Signing keys: the one that signs new tokens, the ones that still verify, and the JWKS.

Every key has a ``kid`` derived from it that reveals nothing of it, and every token
the service signs names its key's ``kid`` in its header. A token is verified with the
key its ``kid`` names, under that key's one algorithm; a token with no ``kid`` (issued
before key ids) with the current key only.

HS256 keys are secrets, never published. EdDSA (Ed25519) and ES256 (P-256) keys are
private keys in PEM files; their public halves are published as a JWKS, so other
services verify tokens without being able to sign one.

Each key is made ready for PyJWT once, when it is loaded: no request loads, parses or
checks a key.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from jwt.algorithms import Algorithm, get_default_algorithms
from jwt.utils import base64url_decode

from app.json_text import unique_keys
from app.private_apis import CheckedSecret, compact_jws, hs256_verifier, jws_header_segment

HS256 = "HS256"
EDDSA = "EdDSA"
ES256 = "ES256"
ALGORITHMS = (HS256, EDDSA, ES256)
#: The kind of private key each asymmetric algorithm signs with.
KEY_KINDS = {EDDSA: "Ed25519", ES256: "EC P-256"}
#: Larger than any PEM key of the kinds above; a bigger file is not a key.
MAX_KEY_FILE_BYTES = 64 * 1024

#: An HS256 kid is PBKDF2 of the secret: checking a guessed secret against the kid then
#: costs 2,000 HMACs, against a token one. So a kid never makes a weak secret easier to
#: find than the tokens it signs already do, and it costs about 0.3 ms once, at start.
SECRET_KID_SALT = b"token-service signing key id"
SECRET_KID_ITERATIONS = 1000
SECRET_KID_BYTES = 12  # 16 base64url characters
#: The public members of a JWK that its RFC 7638 thumbprint covers, by key type.
THUMBPRINT_MEMBERS = {"OKP": ("crv", "kty", "x"), "EC": ("crv", "kty", "x", "y")}


class KeyFileError(ValueError):
    """A signing key or secret cannot be used; the message is one line for operators."""


@dataclass(frozen=True, eq=False)
class SigningKey:
    """One key with its kid and algorithm, made ready for PyJWT when it was loaded."""

    kid: str
    algorithm: str
    #: Where the key comes from, for operators: a setting and a path, never the key.
    source: str
    #: What ``jwt.decode`` is given: the public half or the secret, bound to the algorithm.
    verifier: jwt.PyJWK = field(repr=False)
    #: PyJWT's algorithm, which signs with ``signing_key``; None for a key that only verifies
    #: (a public key file).
    signer: Algorithm | None = field(default=None, repr=False)
    signing_key: Any = field(default=None, repr=False)
    #: The key's entry in the JWKS; None for a secret, which is never published.
    public_jwk: dict[str, str] | None = None

    @property
    def algorithms(self) -> list[str]:
        return [self.algorithm]

    @functools.cached_property
    def header(self) -> str:
        """Return the header segment of every token this key signs, as it is written."""
        return jws_header_segment(self.algorithm, self.kid)

    def sign(self, claims: dict[str, Any]) -> str:
        """Return a JWT of ``claims`` signed with this key, its kid in the header.

        The token is what ``jwt.encode(claims, key, algorithm, {"kid": kid})`` writes,
        its header made once (app/private_apis.py).
        """
        if self.signer is None:
            raise RuntimeError(f"the key {self.kid} is a public key: it cannot sign")
        return compact_jws(self.header, claims, self.signer, self.signing_key)


@dataclass(frozen=True, eq=False)
class KeyRing:
    """The current key, which signs, and every key that verifies, found by kid.

    A ring never changes after it is built, and it is compared by identity: the
    verified-token cache is keyed on it, so a token verified with one ring is never
    taken as verified by a ring that lacks its key.
    """

    current: SigningKey
    previous: tuple[SigningKey, ...] = ()
    by_kid: dict[str, SigningKey] = field(init=False, repr=False)
    #: Header segments exactly as this service writes them, to their key: a dict get.
    by_header: dict[str, SigningKey] = field(init=False, repr=False)
    #: The published JWKS; None when the current key is a secret (HS256).
    jwks: dict[str, list[dict[str, str]]] | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        by_kid: dict[str, SigningKey] = {}
        for key in (self.current, *self.previous):
            by_kid.setdefault(key.kid, key)  # a key listed twice is one key
        by_header = {key.header: key for key in by_kid.values()}
        by_header[jws_header_segment(self.current.algorithm)] = self.current  # no kid
        jwks = None
        if self.current.public_jwk is not None:
            jwks = {"keys": [key.public_jwk for key in by_kid.values() if key.public_jwk]}
        object.__setattr__(self, "by_kid", by_kid)
        object.__setattr__(self, "by_header", by_header)
        object.__setattr__(self, "jwks", jwks)

    @property
    def keys(self) -> tuple[SigningKey, ...]:
        """Return every key, the current one first."""
        return tuple(self.by_kid.values())

    def key_for(self, token: str) -> SigningKey | None:
        """Return the key that may verify ``token``: the one its kid names, or None.

        A token without a kid may be verified with the current key only. The header
        is not trusted for anything else: the key's own algorithm is enforced.
        """
        segment = token.partition(".")[0]
        key = self.by_header.get(segment)
        return key if key is not None else self._key_named_in(segment)

    def _key_named_in(self, segment: str) -> SigningKey | None:
        # A header this service did not write byte for byte: read its kid the long way,
        # strictly: a header naming a member twice (two kids, two algs) names no key.
        try:
            header = json.loads(base64url_decode(segment), object_pairs_hook=unique_keys)
        except (ValueError, RecursionError):  # DuplicateKeyError too
            return None
        if not isinstance(header, dict):
            return None
        if "kid" not in header:
            return self.current
        kid = header["kid"]
        return self.by_kid.get(kid) if isinstance(kid, str) else None


def load_key_ring(
    secret: str,
    algorithm: str = HS256,
    previous_secrets: Sequence[str] = (),
    key_file: str | None = None,
    previous_key_files: Sequence[str] = (),
    key_file_name: str = "SIGNING_KEY_FILE",
) -> KeyRing:
    """Load and check every key; raise KeyFileError, in one line, on the first bad one.

    The current key is ``secret`` for HS256, else the private key in ``key_file``.
    Previous secrets and key files (private or public) only verify; a secret is
    never published, whatever the current algorithm.
    """
    if algorithm == HS256:
        current = secret_key(secret, "SIGNING_SECRET")
    else:
        if key_file is None:
            raise KeyFileError(f"SIGNING_ALGORITHM={algorithm} needs a key file")
        current = private_key_file(key_file, algorithm, key_file_name)
    previous = [
        secret_key(old, f"SIGNING_SECRET_PREVIOUS (secret {number})")
        for number, old in enumerate(previous_secrets, 1)
    ]
    previous += [
        verifying_key_file(path, "SIGNING_KEY_FILE_PREVIOUS") for path in previous_key_files
    ]
    return KeyRing(current, tuple(previous))


def secret_key(secret: str, source: str) -> SigningKey:
    """Return the HS256 key of ``secret``; its kid is derived so that it reveals nothing."""
    try:
        algorithm = CheckedSecret(secret.encode())
    except jwt.InvalidKeyError:
        raise KeyFileError(
            f"{source} looks like a PEM, DER or JSON key; an HS256 secret is random text"
        ) from None
    return SigningKey(
        kid=secret_kid(algorithm.secret),
        algorithm=HS256,
        source=source,
        verifier=hs256_verifier(algorithm),
        signer=algorithm,
        signing_key=algorithm.secret,
    )


def private_key_file(path: str, algorithm: str, name: str = "SIGNING_KEY_FILE") -> SigningKey:
    """Return the key of a PEM private key file for ``algorithm``, which signs and verifies."""
    key = _read_pem_key(path, name)
    if not isinstance(key, _PRIVATE_KEY_TYPES):
        raise KeyFileError(
            f"{name} {path} holds a public key; it must hold the private key"
            " (the public half is derived from it)"
        )
    if algorithm_of(key) != algorithm:
        raise KeyFileError(
            f"{name} {path} holds {_kind_of(key)}; SIGNING_ALGORITHM={algorithm} needs"
            f" an {KEY_KINDS[algorithm]} private key"
        )
    return _asymmetric_key(key, algorithm, f"{name} {path}")


def verifying_key_file(path: str, name: str = "SIGNING_KEY_FILE_PREVIOUS") -> SigningKey:
    """Return the key of a PEM private or public key file, which only verifies."""
    key = _read_pem_key(path, name)
    algorithm = algorithm_of(key)
    if algorithm is None:
        raise KeyFileError(
            f"{name} {path} holds {_kind_of(key)}; a signing key is Ed25519 (EdDSA)"
            " or EC P-256 (ES256)"
        )
    public = key.public_key() if isinstance(key, _PRIVATE_KEY_TYPES) else key
    return _asymmetric_key(public, algorithm, f"{name} {path}")


def algorithm_of(key: Any) -> str | None:
    """Return the algorithm a private or public key signs with here, or None."""
    if isinstance(key, ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey):
        return EDDSA
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey) and isinstance(
        key.curve, ec.SECP256R1
    ):
        return ES256
    return None


def new_private_key_pem(algorithm: str) -> bytes:
    """Return a new private key for ``algorithm`` (EdDSA or ES256), as PKCS#8 PEM."""
    if algorithm == EDDSA:
        key: Any = ed25519.Ed25519PrivateKey.generate()
    elif algorithm == ES256:
        key = ec.generate_private_key(ec.SECP256R1())
    else:
        raise ValueError(f"no key file for {algorithm}: keys are files for EdDSA and ES256")
    pem: bytes = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return pem


def create_private_file(path: str, content: bytes) -> bool:
    """Write ``content`` to a new file ``path`` (mode 0600); return False if it exists.

    Processes that race here each write a complete candidate to a private temporary
    file and try to hard-link it into place. ``link`` fails if the name exists, so
    exactly one candidate wins, and no reader ever sees a half-written file.
    """
    candidate = f"{path}.{os.getpid()}.{secrets.token_hex(8)}.tmp"
    descriptor = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(candidate, path)
        except FileExistsError:
            return False
        return True
    finally:
        os.unlink(candidate)


def secret_kid(secret: bytes) -> str:
    """Return the kid of an HS256 secret: 16 characters that reveal nothing of it."""
    derived = hashlib.pbkdf2_hmac(
        "sha256", secret, SECRET_KID_SALT, SECRET_KID_ITERATIONS, SECRET_KID_BYTES
    )
    return _base64url(derived)


def thumbprint(public_jwk: dict[str, str]) -> str:
    """Return the RFC 7638 SHA-256 thumbprint of a public JWK: the kid of an asymmetric key."""
    members = {name: public_jwk[name] for name in THUMBPRINT_MEMBERS[public_jwk["kty"]]}
    canonical = json.dumps(members, separators=(",", ":"), sort_keys=True).encode()
    return _base64url(hashlib.sha256(canonical).digest())


_PRIVATE_KEY_TYPES = (
    ed25519.Ed25519PrivateKey,
    ec.EllipticCurvePrivateKey,
    rsa.RSAPrivateKey,
    ed448.Ed448PrivateKey,
)


def _asymmetric_key(key: Any, algorithm: str, source: str) -> SigningKey:
    jwa: Algorithm = get_default_algorithms()[algorithm]
    is_private = isinstance(key, _PRIVATE_KEY_TYPES)
    members: dict[str, str] = jwa.to_jwk(key.public_key() if is_private else key, as_dict=True)
    kid = thumbprint(members)
    public_jwk: dict[str, str] = {
        name: members[name] for name in ("kty", "crv", "x", "y") if name in members
    }
    public_jwk.update(kid=kid, alg=algorithm, use="sig")
    return SigningKey(
        kid=kid,
        algorithm=algorithm,
        source=source,
        verifier=jwt.PyJWK(public_jwk, algorithm),
        signer=jwa if is_private else None,
        signing_key=key if is_private else None,
        public_jwk=public_jwk,
    )


def _read_pem_key(path: str, name: str) -> Any:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_KEY_FILE_BYTES + 1)
    except FileNotFoundError:
        raise KeyFileError(f"{name} {path} does not exist") from None
    except IsADirectoryError:
        raise KeyFileError(f"{name} {path} is a folder, not a key file") from None
    except OSError as error:
        raise KeyFileError(f"{name} {path} cannot be read: {error.strerror}") from None
    if len(data) > MAX_KEY_FILE_BYTES:
        raise KeyFileError(f"{name} {path} is larger than {MAX_KEY_FILE_BYTES} bytes: not a key")
    if b"-----BEGIN " not in data:
        raise KeyFileError(f"{name} {path} is not a PEM key file (-----BEGIN PRIVATE KEY-----)")
    try:
        return serialization.load_pem_private_key(data, password=None)
    except TypeError:  # cryptography's word for "encrypted, and no password given"
        raise KeyFileError(
            f"{name} {path} is encrypted; give the key without a passphrase, in a file"
            " only the service's user can read (mode 0600)"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        pass
    try:
        return serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise KeyFileError(f"{name} {path} holds no PEM private or public key") from None


def _kind_of(key: Any) -> str:
    half = "private" if isinstance(key, _PRIVATE_KEY_TYPES) else "public"
    if isinstance(key, ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey):
        return f"an Ed25519 {half} key"
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        curve = "P-256" if isinstance(key.curve, ec.SECP256R1) else key.curve.name
        return f"an EC {curve} {half} key"
    if isinstance(key, rsa.RSAPrivateKey | rsa.RSAPublicKey):
        return f"an RSA {half} key"
    if isinstance(key, ed448.Ed448PrivateKey | ed448.Ed448PublicKey):
        return f"an Ed448 {half} key"
    return f"a {type(key).__name__.removeprefix('_')}"


def _base64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")
