"""A small OpenID Connect provider that misbehaves on request, for the login's negative tests.

The real provider of test_oidc.py is correct by construction; what a broken or
hostile one sends (a wrong audience, an unsigned ID token, a bad discovery
document, a userinfo answer about someone else) has to be made on purpose. It
serves discovery, JWKS, an authorization endpoint that answers at once, a token
endpoint that checks the client, the code and PKCE, and a userinfo endpoint.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

CLIENT_ID = "token-service"
CLIENT_SECRET = "hostile-provider-client-secret-0123456789"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
KEY_ID = "test-key"


class HostileProvider:
    """Serves on 127.0.0.1 in a thread; set the attributes to make it misbehave."""

    def __init__(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.provider = self  # type: ignore[attr-defined]
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.discovery_changes: dict[str, Any] = {}  # a value of None removes the field
        self.discovery_body: bytes | None = None  # replaces the whole document
        self.claim_changes: dict[str, Any] = {}  # a value of None removes the claim
        self.token_changes: dict[str, Any] = {}  # of the token response; None removes
        self.signing = "RS256"  # or "none", or "HS256" keyed with the client secret
        self.userinfo_changes: dict[str, Any] = {}  # a value of None removes the claim
        self.userinfo_status = 200
        self.userinfo_body: bytes | None = None  # replaces the whole userinfo answer
        self.userinfo_delay = 0.0  # seconds before the userinfo endpoint answers
        #: The Authorization header of every userinfo request, in order.
        self.userinfo_requests: list[str | None] = []
        #: Set once the userinfo endpoint has answered (after any delay).
        self.userinfo_answered = threading.Event()
        self.access_tokens: set[str] = set()
        self.pending: dict[str, dict[str, str]] = {}
        self.stopping = threading.Event()
        # serve_forever notices shutdown() only between polls: a short poll stops it at once
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()  # a delayed userinfo answer gives up at once
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def discovery(self) -> bytes:
        if self.discovery_body is not None:
            return self.discovery_body
        document = {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "jwks_uri": f"{self.issuer}/jwks",
            "userinfo_endpoint": f"{self.issuer}/userinfo",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
        }
        document.update(self.discovery_changes)
        return json.dumps({k: v for k, v in document.items() if v is not None}).encode()

    def id_token(self, nonce: str | None) -> str:
        now = int(time.time())
        claims = {
            "iss": self.issuer, "sub": "alice", "aud": CLIENT_ID, "exp": now + 300,
            "iat": now, "nonce": nonce, "name": "Alice Example",
        }  # fmt: skip
        claims.update(self.claim_changes)
        claims = {key: value for key, value in claims.items() if value is not None}
        if self.signing == "none":
            header = _b64(json.dumps({"alg": "none"}).encode())
            return f"{header}.{_b64(json.dumps(claims).encode())}."
        if self.signing == "HS256":
            return jwt.encode(claims, CLIENT_SECRET, algorithm="HS256")
        return jwt.encode(claims, KEY, algorithm="RS256", headers={"kid": KEY_ID})

    def userinfo(self) -> bytes:
        if self.userinfo_body is not None:
            return self.userinfo_body
        claims = {"sub": "alice", "name": "Alice Example", "email": "alice@example.com"}
        claims.update(self.userinfo_changes)
        claims = {key: value for key, value in claims.items() if value is not None}
        return json.dumps(claims).encode()


class _Handler(BaseHTTPRequestHandler):
    server: ThreadingHTTPServer

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    @property
    def provider(self) -> HostileProvider:
        return self.server.provider  # type: ignore[attr-defined]

    def answer(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/.well-known/openid-configuration":
            return self.answer(200, self.provider.discovery())
        if url.path == "/jwks":
            key = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(KEY.public_key()))
            key.update(kid=KEY_ID, use="sig", alg="RS256")
            return self.answer(200, json.dumps({"keys": [key]}).encode())
        if url.path == "/authorize":
            query = dict(parse_qsl(url.query))
            code = secrets.token_urlsafe(16)
            self.provider.pending[code] = query
            target = (
                query["redirect_uri"] + "?" + urlencode({"code": code, "state": query["state"]})
            )
            return self.answer(302, b"", {"Location": target})
        if url.path == "/userinfo":
            return self.answer_userinfo()
        return self.answer(404, b"{}")

    def answer_userinfo(self) -> None:
        authorization = self.headers.get("Authorization")
        self.provider.userinfo_requests.append(authorization)
        if self.provider.stopping.wait(self.provider.userinfo_delay):
            return  # stopped while waiting: nobody listens any more
        if authorization in {f"Bearer {token}" for token in self.provider.access_tokens}:
            self.answer(self.provider.userinfo_status, self.provider.userinfo())
        else:
            self.answer(401, b'{"error": "invalid_token"}')
        self.provider.userinfo_answered.set()

    def do_POST(self) -> None:
        credentials = base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
        if self.headers.get("Authorization") != f"Basic {credentials}":
            return self.answer(401, b'{"error": "invalid_client"}')
        length = int(self.headers.get("Content-Length", "0"))
        form = dict(parse_qsl(self.rfile.read(length).decode()))
        query = self.provider.pending.pop(form.get("code", ""), None)
        verifier = form.get("code_verifier", "").encode()
        if query is None or _b64(hashlib.sha256(verifier).digest()) != query["code_challenge"]:
            return self.answer(400, b'{"error": "invalid_grant"}')
        access_token = secrets.token_urlsafe(16)
        self.provider.access_tokens.add(access_token)
        token = {
            "access_token": access_token,
            "token_type": "Bearer",
            "expires_in": 300,
            "id_token": self.provider.id_token(query.get("nonce")),
        }
        token.update(self.provider.token_changes)
        token = {key: value for key, value in token.items() if value is not None}
        return self.answer(200, json.dumps(token).encode())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
