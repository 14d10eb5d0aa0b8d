"""The requests the benchmark sends, and the credentials each app needs for them."""

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

JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
#: Username of the token holder (a user, not the admin) and of the flooded logins.
HOLDER = "alice"
LOGIN_USERNAME = "bench"
#: Hop-by-hop and per-response headers the floor does not copy from the service.
NOT_COPIED = {"date", "server", "content-length", "connection", "transfer-encoding", "keep-alive"}


@dataclass(frozen=True)
class Scenario:
    """One request shape, answered with one status by every app."""

    key: str
    title: str
    method: str
    path: str
    expected_status: int
    floor_key: str  # the floor's scenario it is compared with
    authorization: str | None = None  # "user", "bad" or "many": which Bearer token
    content_type: str | None = None
    body: str | None = None  # may name {refresh_token}
    peers: bool = True  # False: an endpoint of the service's own, which the peers lack

    @property
    def route(self) -> str:
        return f"{self.method} {self.path}"


def scenarios(distinct_tokens: int) -> list[Scenario]:
    """Return the scenarios in the order they run."""
    return [
        Scenario("a", "GET /user-accessible, valid token", "GET", "/user-accessible", 200, "a",
                 "user"),
        Scenario("a*", f"GET /user-accessible, {distinct_tokens} distinct tokens", "GET",
                 "/user-accessible", 200, "a", "many"),
        Scenario("b", "POST /login, form body", "POST", "/login", 200, "b", None, FORM,
                 f"username={LOGIN_USERNAME}&password=x"),
        Scenario("c", "POST /token, JSON", "POST", "/token", 200, "c", None, JSON,
                 f'{{"username": "{HOLDER}", "refreshToken": "{{refresh_token}}"}}'),
        Scenario("d", "GET /admin-accessible, user token (403)", "GET", "/admin-accessible", 403,
                 "d", "user"),
        Scenario("e", "GET /user-accessible, bad signature (401)", "GET", "/user-accessible",
                 401, "a", "bad"),
        Scenario("f", "POST /restaurant-reservation, JSON", "POST", "/restaurant-reservation",
                 200, "f", "user", JSON, '{"guestsCount": 4}'),
        Scenario("g", "GET /auth/check, valid token (the nginx gateway's check)", "GET",
                 "/auth/check", 200, "a", "user", peers=False),
    ]  # fmt: skip


@dataclass(frozen=True)
class Credentials:
    """An app's tokens for the scenarios: one login, a forged copy, many minted copies."""

    access_token: str
    refresh_token: str
    bad_signature: str
    many_tokens: Path


@dataclass(frozen=True)
class Answer:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


def send(url: str, method: str, headers: dict[str, str], body: str | None) -> Answer:
    """Send one request (loopback only) and return the answer, error statuses included."""
    if not url.startswith(("http://127.", "http://[::1]", "http://localhost")):
        raise ValueError(f"only loopback addresses are used, not {url}")
    request = urllib.request.Request(
        url, body.encode() if body is not None else None, headers, method=method
    )
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return Answer(response.status, response.getheaders(), response.read())
    except urllib.error.HTTPError as error:
        return Answer(error.code, list(error.headers.items()), error.read())


def request_parts(
    scenario: Scenario, credentials: Credentials
) -> tuple[dict[str, str], str | None]:
    """Return the headers and body of ``scenario`` for an app holding ``credentials``."""
    headers = {}
    if scenario.authorization == "user":
        headers["Authorization"] = f"Bearer {credentials.access_token}"
    elif scenario.authorization == "bad":
        headers["Authorization"] = f"Bearer {credentials.bad_signature}"
    elif scenario.authorization == "many":
        with credentials.many_tokens.open() as tokens:
            headers["Authorization"] = f"Bearer {tokens.readline().strip()}"
    if scenario.content_type:
        headers["Content-Type"] = scenario.content_type
    body = None
    if scenario.body is not None:
        body = scenario.body.replace("{refresh_token}", credentials.refresh_token)
    return headers, body


def wrk_script(scenario: Scenario, credentials: Credentials) -> str:
    """Return the Lua script that sends ``scenario`` again and again."""
    if scenario.authorization == "many":
        return wrk.bearer_cycle_script(credentials.many_tokens)
    headers, body = request_parts(scenario, credentials)
    return wrk.fixed_request_script(scenario.method, headers, body)


def log_in(base_url: str) -> dict[str, str]:
    """Log the token holder in and return the app's JSON answer."""
    answer = send(
        f"{base_url}/login", "POST", {"Content-Type": JSON},
        json.dumps({"username": HOLDER, "password": "x"}),
    )  # fmt: skip
    if answer.status != 200:
        raise RuntimeError(f"login at {base_url} answered {answer.status}: {answer.body[:200]!r}")
    return json.loads(answer.body)


def credentials(base_url: str, secret: str, distinct_tokens: int, folder: Path) -> Credentials:
    """Log in at ``base_url`` and derive the scenarios' tokens from the app's own token."""
    tokens = log_in(base_url)
    many = folder / f"tokens-{secrets.token_hex(4)}.txt"
    many.write_text(
        "\n".join(mint(tokens["accessToken"], secret, n) for n in range(distinct_tokens)) + "\n"
    )
    return Credentials(
        tokens["accessToken"],
        tokens["refreshToken"],
        forge_signature(tokens["accessToken"]),
        many,
    )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _sign(signing_input: str, key: bytes) -> str:
    return _b64(hmac.new(key, signing_input.encode(), hashlib.sha256).digest())


def forge_signature(token: str) -> str:
    """Return ``token`` with its header and claims but an HS256 signature made with another key."""
    signing_input = token.rsplit(".", 1)[0]
    return f"{signing_input}.{_sign(signing_input, secrets.token_bytes(32))}"


def mint(template: str, secret: str, number: int) -> str:
    """Return a valid token like ``template`` (same header, claims, expiry) for another user.

    The holder's name becomes ``user<number>`` wherever a claim holds it, and unique
    ids (``jti``, ``csrf``) are new, so each token is distinct and signed as the app
    signs its own.
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


def floor_answers(service_answers: dict[str, Answer]) -> dict[str, dict]:
    """Return the floor's constant answers (JSON-ready) from the service's, by route."""
    return {
        route: {
            "status": answer.status,
            "headers": [
                [name, value] for name, value in answer.headers if name.lower() not in NOT_COPIED
            ],
            "body": answer.body.decode("latin-1"),
        }
        for route, answer in service_answers.items()
    }
