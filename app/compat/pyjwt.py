"""What the service relies on in PyJWT beyond its public API.

An HS256 secret checked once rather than on every signature check, and tokens signed
without ``jwt.encode``, byte for byte what it writes.

tests/unit/test_compat.py checks each assumption against the installed release.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import jwt
import orjson
from jwt.algorithms import Algorithm, HMACAlgorithm

#: The distribution and the release (major.minor) whose internals were checked.
DISTRIBUTION = "PyJWT"
CHECKED_VERSION = "2.15"


class CheckedSecret(HMACAlgorithm):
    """HS256 bound to one secret, which passed PyJWT's key checks once, when it was loaded.

    PyJWT checks an HMAC key on every call (that it is not a PEM, DER or JWK key);
    only this very secret object skips them here, and any other key still goes
    through all of them.
    """

    def __init__(self, secret: bytes) -> None:
        super().__init__(HMACAlgorithm.SHA256)
        self.secret = super().prepare_key(secret)

    def prepare_key(self, key: str | bytes) -> bytes:
        return key if key is self.secret else super().prepare_key(key)


def hs256_verifier(algorithm: CheckedSecret) -> jwt.PyJWK:
    """Return the PyJWK that ``jwt.decode`` verifies HS256 tokens of ``algorithm``'s secret with.

    PyJWT verifies a PyJWK with the PyJWK's own ``Algorithm`` attribute, and prepares
    its ``key`` through it on every call: here that is ``algorithm``, whose secret is
    checked already. The algorithm stays pinned to HS256 by the PyJWK itself.
    """
    verifier = jwt.PyJWK({"kty": "oct", "k": base64url(algorithm.secret)}, "HS256")
    verifier.Algorithm = algorithm
    verifier.key = algorithm.secret
    return verifier


def jws_header_segment(algorithm: str, kid: str | None = None) -> str:
    """Return a token's header segment as ``jwt.encode`` writes it: sorted compact JSON."""
    header = {"alg": algorithm, "kid": kid, "typ": "JWT"}
    if kid is None:
        del header["kid"]
    return base64url(json.dumps(header, separators=(",", ":"), sort_keys=True).encode())


def compact_jws(header_segment: str, claims: dict[str, Any], signer: Algorithm, key: Any) -> str:
    """Return the token ``jwt.encode`` would write of ``claims`` under ``header_segment``.

    Signed by PyJWT's own algorithm object; only the header, the same for every
    token of a key, is made once instead of each time, and the key is not checked again.
    """
    try:
        payload = orjson.dumps(claims)  # compact JSON, like jwt.encode's, UTF-8 unescaped
    except TypeError:  # a lone surrogate (in a provider's user id): JSON's \u escape
        payload = json.dumps(claims, separators=(",", ":")).encode()
    signing_input = f"{header_segment}.{base64url(payload)}"
    signature = signer.sign(signing_input.encode("ascii"), key)
    return f"{signing_input}.{base64url(signature)}"


def base64url(data: bytes) -> str:
    """Return ``data`` in base64url without padding, as JWS writes it."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")
