"""The bench's requests: sent once to check an answer, or written as wrk's Lua script.

Each app's tokens come from a login at that app (the service's from the last of the
holder's ``HOLDER_SESSIONS`` logins, so ``GET /sessions`` lists that many); the forged and
the distinct tokens are derived from that token and the app's secret, signed as the app
signs its own. The service's OAuth requests authenticate as the one client
``register_client`` wrote to its CLIENTS_FILE before it started.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
import secrets
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

from bench import wrk
from bench.scenarios import HOLDER, JSON, Request

#: The id of the one client registered in the service's CLIENTS_FILE.
CLIENT_ID = "bench"

#: Per-response and hop-by-hop headers the floor does not copy from the service.
NOT_COPIED = {"date", "server", "content-length", "connection", "transfer-encoding", "keep-alive"}


@dataclass(frozen=True)
class Credentials:
    """An app's tokens: one login, a forged copy, a file of distinct minted copies."""

    access_token: str
    refresh_token: str
    bad_signature: str
    many_tokens: Path
    client_authorization: str = ""  # "Basic ..." of the app's registered client, if it has one


@dataclass(frozen=True)
class Answer:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


def send(url: str, method: str, headers: dict[str, str], body: str | None) -> Answer:
    """Send one request (loopback only) and return the answer, error statuses included."""
    if not url.startswith("http://127.0.0.1:"):
        raise ValueError(f"only loopback addresses are used, not {url}")
    data = body.encode() if body is not None else None
    request = urllib.request.Request(url, data, headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return Answer(response.status, response.getheaders(), response.read())
    except urllib.error.HTTPError as error:
        return Answer(error.code, list(error.headers.items()), error.read())


def log_in(base_url: str) -> dict[str, str]:
    """Log the token holder in and return the app's JSON answer."""
    body = json.dumps({"username": HOLDER, "password": "x"})
    answer = send(f"{base_url}/login", "POST", {"Content-Type": JSON}, body)
    if answer.status != 200:
        raise RuntimeError(f"login at {base_url} answered {answer.status}: {answer.body[:200]!r}")
    return json.loads(answer.body)


def credentials(
    base_url: str,
    secret: str,
    distinct: int,
    folder: Path,
    *,
    logins: int = 1,
    client_authorization: str = "",
) -> Credentials:
    """Log in ``logins`` times at ``base_url``; keep the last tokens; derive a forged token
    and ``distinct`` minted ones."""
    for _ in range(logins):
        tokens = log_in(base_url)
    many = folder / f"tokens-{secrets.token_hex(4)}.txt"
    minted = (mint(tokens["accessToken"], secret, n) for n in range(distinct))
    many.write_text("\n".join(minted) + "\n")
    bad = forge_signature(tokens["accessToken"])
    return Credentials(
        tokens["accessToken"], tokens["refreshToken"], bad, many, client_authorization
    )


def register_client(clients_file: Path) -> str:
    """Register the client ``CLIENT_ID`` (role user) in ``clients_file`` with the service's
    own writer, as ``flask clients add`` does; return its ``Authorization`` header value
    (client_secret_basic)."""
    from app.oauth.clients import Client, change_clients, new_client_secret, secret_digest

    secret = new_client_secret()

    def add(registered: dict[str, Client]) -> bool:
        registered[CLIENT_ID] = Client(CLIENT_ID, secret_digest(secret), "user")
        return True

    change_clients(str(clients_file), add)
    # The id and the secret are each form-urlencoded first; neither has a byte that changes.
    return "Basic " + base64.b64encode(f"{CLIENT_ID}:{secret}".encode()).decode()


def request_parts(request: Request, held: Credentials) -> tuple[dict[str, str], str | None]:
    """Return the headers and body of ``request`` for an app holding ``held``."""
    headers = {}
    if request.bearer == "user":
        headers["Authorization"] = f"Bearer {held.access_token}"
    elif request.bearer == "bad":
        headers["Authorization"] = f"Bearer {held.bad_signature}"
    elif request.bearer == "many":
        with held.many_tokens.open() as tokens:
            headers["Authorization"] = f"Bearer {tokens.readline().strip()}"
    if request.client:
        if not held.client_authorization:
            raise RuntimeError(f"{request.key} ({request.title}) needs a registered client")
        headers["Authorization"] = held.client_authorization
    if request.content_type:
        headers["Content-Type"] = request.content_type
    headers.update((name, value.replace("{n}", "1")) for name, value in request.headers)
    body = request.body
    if body is not None:
        body = body.replace("{refresh_token}", held.refresh_token)
        body = body.replace("{access_token}", held.access_token)
    return headers, body


def wrk_script(request: Request, held: Credentials) -> str:
    """Return the Lua script that sends ``request`` again and again."""
    if request.bearer == "many":
        return wrk.bearer_cycle_script(held.many_tokens)
    headers, body = request_parts(request, held)
    if request.distinct:
        headers.update(request.headers)  # "{n}" as written, for the script to fill in
        return wrk.numbered_request_script(request.method, headers, request.distinct)
    return wrk.fixed_request_script(request.method, headers, body)


def check(base_url: str, request: Request, held: Credentials) -> Answer:
    """Send ``request`` once; raise unless it is answered with its status."""
    headers, body = request_parts(request, held)
    answer = send(base_url + request.path, request.method, headers, body)
    if answer.status != request.status:
        raise RuntimeError(
            f"{base_url}: {request.key} ({request.title}) expected {request.status}, got "
            f"{answer.status} {answer.body[:200]!r}"
        )
    return answer


def floor_answer(answer: Answer) -> dict:
    """Return an answer as the floor replays it (JSON-ready): status, headers, body."""
    headers = [[name, value] for name, value in answer.headers if name.lower() not in NOT_COPIED]
    return {"status": answer.status, "headers": headers, "body": answer.body.decode("latin-1")}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _sign(signing_input: str, key: bytes) -> str:
    return _b64(hmac.new(key, signing_input.encode(), hashlib.sha256).digest())


def forge_signature(token: str) -> str:
    """Return ``token`` with an HS256 signature made with another key."""
    signing_input = token.rsplit(".", 1)[0]
    return f"{signing_input}.{_sign(signing_input, secrets.token_bytes(32))}"


def mint(template: str, secret: str, number: int) -> str:
    """Return a valid token like ``template`` (same header, claims, expiry) for another user.

    The holder's name becomes ``user<number>`` wherever a claim holds it, and unique ids
    (``jti``, ``csrf``) are new, so each token is distinct and signed as the app signs.
    """
    header, payload, _ = template.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    minted = copy.deepcopy(claims)
    for name, value in claims.items():
        if value == HOLDER:
            minted[name] = f"user{number}"
        elif name in {"jti", "csrf"}:
            minted[name] = str(uuid.uuid4())
    signing_input = f"{header}.{_b64(json.dumps(minted, separators=(',', ':')).encode())}"
    return f"{signing_input}.{_sign(signing_input, secret.encode())}"
