"""Helpers that log in and craft tokens, as a client or an attacker would."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import jwt
from flask.testing import FlaskClient

from tests.helpers.apps import ServiceKey


def login(client: FlaskClient, username: str = "alice", **kwargs: Any) -> dict[str, str]:
    """Log ``username`` in with a JSON body and return the two tokens."""
    response = client.post("/login", json={"username": username, "password": "pw"}, **kwargs)
    assert response.status_code == 200, response.data
    return response.get_json()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def make_token(
    key: str | ServiceKey, claims: dict[str, Any], algorithm: str | None = None, **headers
) -> str:
    """Sign arbitrary claims, as an attacker holding (or guessing) a key would.

    ``key`` is a secret (HS256 by default) or the app's own key (its algorithm).
    No ``kid`` unless one is given: the app verifies such a token with its current key.
    """
    if isinstance(key, ServiceKey):
        algorithm = algorithm or key.algorithm
        key = key.private
    token = jwt.encode(claims, key, algorithm=algorithm or "HS256", headers=headers or None)
    if algorithm == "ES256" and es256_signature(token)[1] > P256_ORDER // 2:
        token = ecdsa_twin(token)  # in the one form the service accepts, as its own signer
    return token


def unsigned_token(claims: dict[str, Any]) -> str:
    """Return an ``alg: none`` token with an empty signature."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}."


def valid_claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    claims = {"username": "alice", "role": "user", "iat": now, "exp": now + 60}
    claims.update(changes)
    return {key: value for key, value in claims.items() if value is not None}


#: The order n of P-256's group (SEC 2, section 2.4.2), written out here apart from the
#: app's own: a twin made with a wrong n would not verify with PyJWT.
P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def es256_signature(token: str) -> tuple[int, int]:
    """Return the (r, s) of an ES256 token's signature."""
    signature = base64.urlsafe_b64decode(token.rpartition(".")[2] + "==")
    assert len(signature) == 64
    return int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")


def with_es256_signature(token: str, r: int, s: int) -> str:
    """Return ``token`` with its signature replaced by (r, s), each 32 bytes big-endian."""
    signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    encoded = base64.urlsafe_b64encode(signature).rstrip(b"=").decode()
    return f"{token.rpartition('.')[0]}.{encoded}"


def ecdsa_twin(token: str) -> str:
    """Return the twin of an ES256 token: its signature (r, s) as (r, n - s), which
    verifies as well, and which anyone holding the token can write."""
    r, s = es256_signature(token)
    return with_es256_signature(token, r, P256_ORDER - s)


def segment(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


def padded(part: str) -> str:
    return part + "=" * (-len(part) % 4)


def sign_texts(key, header: str, payload: str, pad: str = "") -> str:
    """Return a token of exactly these JSON texts, signed with ``key`` (the app's own).

    ``pad`` names the segments ("h", "p", "s") written with base64 padding; the
    signature covers the segments as written, so only the padding is wrong.
    """
    head, body = segment(header), segment(payload)
    head, body = (padded(head) if "h" in pad else head), (padded(body) if "p" in pad else body)
    signing_input = f"{head}.{body}"
    signature = base64.urlsafe_b64encode(key.signer.sign(signing_input.encode(), key.signing_key))
    signature_text = signature.decode() if "s" in pad else signature.rstrip(b"=").decode()
    return f"{signing_input}.{signature_text}"


def header_text(key, **extra: str) -> str:
    members = {"alg": key.algorithm, "kid": key.kid, "typ": "JWT", **extra}
    return json.dumps(members, separators=(",", ":"))


#: The spellings of DELETE /token/{t} a client may send: each must be redacted in the logs.
TOKEN_SPELLINGS = [
    "/token/{t}",
    "/%74oken/{t}",
    "/%74%6F%6B%65%6E/{t}",
    "/token%2F{t}",
    "/token%2f{t}",
    "/to%6Ben%2F{t}",
    "/token/{t}/",
    "/token//{t}",
    "/token/{t}?x=1",
]


def refresh(client: Any, refresh_token: str, username: str = "alice") -> Any:
    """Answer POST /token with ``refresh_token`` through the test ``client``."""
    return client.post("/token", json={"username": username, "refreshToken": refresh_token})


def assert_unauthorized(response: Any) -> None:
    """Check that ``response`` is the 401 of SPEC.md: text/plain ``Unauthorized``."""
    assert response.status_code == 401
    assert response.mimetype == "text/plain"
    assert response.data == b"Unauthorized"


def rotated(client: Any, refresh_token: str, username: str = "alice") -> str:
    """Refresh with ``refresh_token`` and return the successor it answers."""
    response = refresh(client, refresh_token, username)
    assert response.status_code == 200, response.data
    return response.get_json()["refreshToken"]
