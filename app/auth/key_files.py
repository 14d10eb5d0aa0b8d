"""Signing key files (read and checked, generated, written privately) and key ids.

The keys here are ``cryptography``'s objects; ``app.auth.keys`` makes them ready for
PyJWT and puts them on the key ring.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
from typing import Any

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

from app.config.settings import EDDSA, ES256, SigningAlgorithm

#: The kind of private key each asymmetric algorithm signs with.
KEY_KINDS = {EDDSA: "Ed25519", ES256: "EC P-256"}
#: Larger than any PEM key of the kinds above; a bigger file is not a key.
MAX_KEY_FILE_BYTES = 64 * 1024
#: An HS256 kid is PBKDF2 of the secret: checking a guessed secret against the kid then
#: costs 2,000 HMACs, against a token one. So a kid never makes a weak secret easier to
#: find than the tokens it signs already do, and its cost is paid once, at start.
SECRET_KID_SALT = b"token-service signing key id"
SECRET_KID_ITERATIONS = 1000
SECRET_KID_BYTES = 12  # 16 base64url characters
#: The public members of a JWK that its RFC 7638 thumbprint covers, by key type.
THUMBPRINT_MEMBERS = {"OKP": ("crv", "kty", "x"), "EC": ("crv", "kty", "x", "y")}
#: The order n of P-256's group (SEC 2, section 2.4.2). An ES256 signature is r and s, each
#: 32 bytes, big-endian, in 1..n-1; and (r, s) has a twin (r, n - s) that verifies as well.
P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
ES256_SIGNATURE_BYTES = 64
PRIVATE_KEY_TYPES = (
    ed25519.Ed25519PrivateKey,
    ec.EllipticCurvePrivateKey,
    rsa.RSAPrivateKey,
    ed448.Ed448PrivateKey,
)


class KeyFileError(ValueError):
    """A signing key or secret cannot be used; the message is one line for operators."""


def read_private_key(path: str, algorithm: str, name: str) -> Any:
    """Return the private key of a PEM file, checked to be one that signs ``algorithm``."""
    key = read_pem_key(path, name)
    if not isinstance(key, PRIVATE_KEY_TYPES):
        raise KeyFileError(
            f"{name} {path} holds a public key; it must hold the private key"
            " (the public half is derived from it)"
        )
    if algorithm_of(key) != algorithm:
        raise KeyFileError(
            f"{name} {path} holds {kind_of(key)}; SIGNING_ALGORITHM={algorithm} needs"
            f" an {KEY_KINDS[algorithm]} private key"
        )
    return key


def read_public_key(path: str, name: str) -> tuple[Any, SigningAlgorithm]:
    """Return the public key of a PEM private or public key file, and its algorithm."""
    key = read_pem_key(path, name)
    algorithm = algorithm_of(key)
    if algorithm is None:
        raise KeyFileError(
            f"{name} {path} holds {kind_of(key)}; a signing key is Ed25519 (EdDSA)"
            " or EC P-256 (ES256)"
        )
    return (key.public_key() if isinstance(key, PRIVATE_KEY_TYPES) else key), algorithm


def algorithm_of(key: Any) -> SigningAlgorithm | None:
    """Return the algorithm a private or public key signs with here, or None."""
    if isinstance(key, ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey):
        return EDDSA
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey) and isinstance(
        key.curve, ec.SECP256R1
    ):
        return ES256
    return None


def is_low_s(signature: bytes) -> bool:
    """Return whether a raw ES256 signature (r || s) is the one form this service accepts:
    64 bytes, r in 1..n-1, and s in 1..n/2 (the low-S half, as in Bitcoin's BIP 62)."""
    if len(signature) != ES256_SIGNATURE_BYTES:
        return False
    r = int.from_bytes(signature[:32], "big")
    s = int.from_bytes(signature[32:], "big")
    return 0 < r < P256_ORDER and 0 < s <= P256_ORDER // 2


def twin_signature(signature: bytes) -> bytes:
    """Return the twin (r, n - s) of a raw ES256 signature (r || s) with s in 1..n-1."""
    s = int.from_bytes(signature[32:], "big")
    return signature[:32] + (P256_ORDER - s).to_bytes(32, "big")


def low_s(signature: bytes) -> bytes:
    """Return the low-S form of a raw ES256 signature (r || s): s replaced by n - s if above n/2."""
    s = int.from_bytes(signature[32:], "big")
    return signature if s <= P256_ORDER // 2 else twin_signature(signature)


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


def read_pem_key(path: str, name: str) -> Any:
    """Return the private or public key of a PEM file; raise KeyFileError saying why not."""
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


def kind_of(key: Any) -> str:
    """Return what ``key`` is, for a message: ``an EC P-384 public key``."""
    half = "private" if isinstance(key, PRIVATE_KEY_TYPES) else "public"
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


def secret_kid(secret: bytes) -> str:
    """Return the kid of an HS256 secret: 16 characters that reveal nothing of it."""
    derived = hashlib.pbkdf2_hmac(
        "sha256", secret, SECRET_KID_SALT, SECRET_KID_ITERATIONS, SECRET_KID_BYTES
    )
    return base64url(derived)


def thumbprint(public_jwk: dict[str, str]) -> str:
    """Return the RFC 7638 SHA-256 thumbprint of a public JWK: the kid of an asymmetric key."""
    members = {name: public_jwk[name] for name in THUMBPRINT_MEMBERS[public_jwk["kty"]]}
    canonical = json.dumps(members, separators=(",", ":"), sort_keys=True).encode()
    return base64url(hashlib.sha256(canonical).digest())


def base64url(data: bytes) -> str:
    """Return ``data`` in base64url without padding, as JOSE writes it."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")
