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

import functools
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey
from jwt.algorithms import Algorithm, ECAlgorithm, get_default_algorithms
from jwt.utils import base64url_decode

from app.auth.json_text import unique_keys
from app.auth.key_files import (
    PRIVATE_KEY_TYPES,
    KeyFileError,
    low_s,
    read_private_key,
    read_public_key,
    secret_kid,
    thumbprint,
)
from app.compat.pyjwt import CheckedSecret, compact_jws, hs256_verifier, jws_header_segment
from app.config.parsers import ConfigError
from app.config.settings import ES256, HS256, KEY_FILE_NAMES, Settings


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

        The token is what ``jwt.encode(claims, key, algorithm, {"kid": kid})`` writes
        (PyJWS's header: sorted keys, compact JSON), signed by PyJWT's own algorithm;
        only the header, the same for every token, is made once instead of each time.
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


class LowSES256(ECAlgorithm):
    """PyJWT's ES256, each signature written in its low-S form, the one form verified here.

    ``cryptography`` returns an ECDSA signature (r, s) or its twin (r, n - s), as the
    random nonce falls; both verify, so verification accepts only the low-S one (one
    token, one text), and every token this service signs must be in that form.
    """

    def __init__(self) -> None:
        super().__init__(ECAlgorithm.SHA256)

    def sign(self, msg: bytes, key: EllipticCurvePrivateKey) -> bytes:
        return low_s(super().sign(msg, key))


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


def settings_key_ring(settings: Settings) -> KeyRing:
    """Return the key ring ``settings`` name (after ``prepare_instance``); ConfigError if bad."""
    name = KEY_FILE_NAMES.get(settings.signing_algorithm)
    generated = name is not None and settings.signing_key_file == os.path.join(
        settings.instance_path, name
    )
    try:
        return load_key_ring(
            settings.signing_secret,
            settings.signing_algorithm,
            settings.signing_secret_previous,
            settings.signing_key_file,
            settings.signing_key_file_previous,
            key_file_name="the generated key" if generated else "SIGNING_KEY_FILE",
        )
    except KeyFileError as error:
        raise ConfigError(str(error)) from None


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
    return _asymmetric_key(read_private_key(path, algorithm, name), algorithm, f"{name} {path}")


def verifying_key_file(path: str, name: str = "SIGNING_KEY_FILE_PREVIOUS") -> SigningKey:
    """Return the key of a PEM private or public key file, which only verifies."""
    public, algorithm = read_public_key(path, name)
    return _asymmetric_key(public, algorithm, f"{name} {path}")


def _asymmetric_key(key: Any, algorithm: str, source: str) -> SigningKey:
    jwa: Algorithm = LowSES256() if algorithm == ES256 else get_default_algorithms()[algorithm]
    is_private = isinstance(key, PRIVATE_KEY_TYPES)
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
