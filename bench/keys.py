"""In-process cost of signing and verifying access tokens, per algorithm: µs per call.

    .venv/bin/python bench/keys.py [--rounds 7]

Rows: ``sign`` is ``issue_access_token``; ``verify, cached`` is ``verify_access_token``
on a token it verified before (the verified-token cache); ``verify, uncached`` cycles
through more distinct tokens than that cache holds, so every call is PyJWT's full
verification. The ``PyJWT alone`` rows are ``jwt.encode``/``jwt.decode`` with the secret
string, as the service called them before key ids: the HS256 baseline. Each figure is
the best of ``--rounds`` rounds (the least disturbed by other work on the machine).
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path

import jwt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.auth.key_files import create_private_file, new_private_key_pem
from app.auth.keys import load_key_ring
from app.auth.tokens import (
    ACCESS_TOKEN_CLAIMS,
    VERIFIED_TOKEN_CACHE_SIZE,
    issue_access_token,
    verify_access_token,
)

DISTINCT_TOKENS = 3 * VERIFIED_TOKEN_CACHE_SIZE
CALLS = 3000


def best_microseconds(call: Callable[[], object], rounds: int, calls: int = CALLS) -> float:
    """Return the best of ``rounds`` rounds of ``calls`` calls, in µs per call."""
    return min(timeit.repeat(call, number=calls, repeat=rounds)) / calls * 1e6


def cycling(function: Callable[[str], object], tokens: list[str]) -> Callable[[], object]:
    """Return a call that verifies the next of ``tokens`` each time."""
    position = [0]

    def call() -> object:
        position[0] = (position[0] + 1) % len(tokens)
        return function(tokens[position[0]])

    return call


def measure(name: str, keys, rounds: int) -> list[tuple[str, float]]:
    now = int(time.time())
    tokens = [
        issue_access_token(f"user{n}", "user", keys, 3600, now=now) for n in range(DISTINCT_TOKENS)
    ]
    one = tokens[0]
    verify_access_token(one, keys)
    calls = {
        "sign": lambda: issue_access_token("alice", "user", keys, 60),
        "verify, cached": lambda: verify_access_token(one, keys),
        "verify, uncached": cycling(lambda token: verify_access_token(token, keys), tokens),
    }
    return [(f"{name}: {what}", best_microseconds(call, rounds)) for what, call in calls.items()]


def measure_plain_pyjwt(secret: str, rounds: int) -> list[tuple[str, float]]:
    now = int(time.time())
    claims = {"username": "alice", "role": "user", "iat": now, "exp": now + 3600}
    token = jwt.encode(claims, secret, algorithm="HS256")
    options = {"require": list(ACCESS_TOKEN_CLAIMS), "verify_iat": False, "verify_nbf": False}
    calls = {
        "sign": lambda: jwt.encode(claims, secret, algorithm="HS256"),
        "verify": lambda: jwt.decode(
            token, secret, algorithms=["HS256"], options=options, leeway=0
        ),
    }
    name = "PyJWT alone, HS256 secret string"
    return [(f"{name}: {what}", best_microseconds(call, rounds)) for what, call in calls.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="rounds per figure (best is kept)")
    rounds = min(max(parser.parse_args().rounds, 1), 50)
    secret = secrets.token_urlsafe(48)
    rows = measure_plain_pyjwt(secret, rounds)
    rows += measure("HS256", load_key_ring(secret), rounds)
    with tempfile.TemporaryDirectory() as folder:
        for algorithm in ("EdDSA", "ES256"):
            key_file = os.path.join(folder, f"{algorithm}.pem")
            create_private_file(key_file, new_private_key_pem(algorithm))
            rows += measure(algorithm, load_key_ring(secret, algorithm, key_file=key_file), rounds)
    width = max(len(name) for name, _ in rows)
    for name, microseconds in rows:
        print(f"{name:<{width}}  {microseconds:8.1f} µs")


if __name__ == "__main__":
    main()
