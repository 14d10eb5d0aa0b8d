"""docs/gateway.md's runnable parts against the real service: the curl example of the check,
and docs/examples/upstream.py, a service verifying tokens itself, through a key rotation."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import jwt
import pytest
import requests
from werkzeug.serving import make_server

from app.auth.key_files import create_private_file, new_private_key_pem
from app.auth.keys import load_key_ring
from tests.helpers.docs import marked_block
from tests.helpers.servers import Gunicorn, fresh, stop_process
from tests.helpers.tokens import unsigned_token
from tests.helpers.tools import ROOT, require_tool, which

pytestmark = [pytest.mark.gunicorn, pytest.mark.store("sqlite")]

PAGE = ROOT / "docs" / "gateway.md"
EXAMPLE = ROOT / "docs" / "examples" / "upstream.py"
JWKS_PATH = "/.well-known/jwks.json"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("upstream_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def serve() -> Iterator[Callable[..., str]]:
    """Return a starter of WSGI apps on free loopback ports (threads); all stopped after."""
    servers = []

    def start(app) -> str:
        server = make_server("127.0.0.1", 0, app, threaded=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def key_file(folder: Path, name: str) -> str:
    path = folder / name
    create_private_file(str(path), new_private_key_pem("EdDSA"))
    return str(path)


def sign(path: str, **claims) -> str:
    """Return an access token signed with the key file at ``path``, as the service signs."""
    now = int(time.time())
    full = {"username": "mallory", "role": "admin", "iat": now, "exp": now + 60, **claims}
    return load_key_ring("s" * 43, "EdDSA", key_file=path).current.sign(full)


def restart(server: Gunicorn, **settings: str) -> None:
    """Restart the service with other settings on the same port (the listener is kept)."""
    assert server.process is not None
    stop_process(server.process)
    server.log.close()
    server.env = {**server.env, **settings}
    server.start()


def jwks_fetches(server: Gunicorn) -> int:
    lines = server.log_path.read_text().splitlines()
    return sum(json.loads(line).get("path") == JWKS_PATH for line in lines if line[:1] == "{")


def token_of(server: Gunicorn, username: str) -> str:
    return fresh("POST", f"{server.url}/login", json={"username": username}).json()["accessToken"]


def call(base: str, path: str, token: str | None = None) -> requests.Response:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return requests.get(f"{base}{path}", headers=headers, timeout=10)


def test_the_example_verifies_the_services_tokens_through_a_key_rotation(
    gunicorn_server, serve, tmp_path
):
    example = load_example()
    first, second, stranger = (key_file(tmp_path, f"key-{n}.pem") for n in range(3))
    service = gunicorn_server({"SIGNING_ALGORITHM": "EdDSA", "SIGNING_KEY_FILE": first}, workers=1)
    jwks = f"{service.url}{JWKS_PATH}"
    upstream = serve(example.create_upstream(jwks, refetch_cooldown=0))
    steady = serve(example.create_upstream(jwks))  # PyJWT's default: 30 s between refetches

    alice, admin = token_of(service, "alice"), token_of(service, "admin")
    answer = call(upstream, "/hello", alice)
    assert answer.status_code == 200
    assert answer.json()["message"] == "hello, alice"
    assert answer.json()["user"]["role"] == "user"
    answer = call(upstream, "/admin", alice)
    assert (answer.status_code, answer.json()) == (403, {"message": "No access"})
    assert call(upstream, "/admin", admin).json()["message"] == "for admins only"
    refused = call(upstream, "/hello")
    assert (refused.status_code, refused.text) == (401, "Unauthorized")
    assert refused.headers["WWW-Authenticate"] == "Bearer"
    expired = sign(first, exp=int(time.time()) - 1)
    claims = jwt.decode(alice, options={"verify_signature": False})
    for token in [
        expired,
        unsigned_token(claims),
        sign(stranger),  # a kid no key set holds: fetched again, still unknown
        sign(first, role="root"),
        alice.rsplit(".", 1)[0] + "." + sign(first).rsplit(".", 1)[1],  # another's signature
    ]:
        assert call(upstream, "/hello", token).status_code == 401

    # A flood of made-up kids costs the service one fetch per cooldown, not one each.
    assert call(steady, "/hello", alice).status_code == 200
    before = jwks_fetches(service)
    for _ in range(5):
        assert call(steady, "/hello", sign(stranger)).status_code == 401
    assert jwks_fetches(service) == before

    # The rotation: a new current key, the old one kept to verify its tokens.
    restart(service, SIGNING_KEY_FILE=second, SIGNING_KEY_FILE_PREVIOUS=first)
    bob = token_of(service, "bob")
    assert jwt.get_unverified_header(bob)["kid"] != jwt.get_unverified_header(alice)["kid"]
    before = jwks_fetches(service)
    assert call(upstream, "/hello", bob).json()["message"] == "hello, bob"  # unknown kid
    assert jwks_fetches(service) == before + 1  # ...fetched the key set again, once
    assert call(upstream, "/hello", bob).status_code == 200
    assert call(upstream, "/hello", alice).status_code == 200  # the previous key's token
    assert jwks_fetches(service) == before + 1

    # No key set to be had: never a pass.
    service.stop()
    answer = call(upstream, "/hello", sign(stranger))
    assert answer.status_code == 503
    assert call(upstream, "/hello", bob).status_code == 200  # keys already held still verify


def test_the_gateway_pages_curl_example_runs_against_gunicorn(gunicorn_server):
    require_tool(bool(which("curl") and which("jq")), "curl and jq", "apt-get install curl jq")
    server = gunicorn_server(workers=1)
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", marked_block(PAGE.read_text(), "gateway-check")],
        env={"PATH": "/usr/bin:/bin", "BASE_URL": server.url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert lines[:2] == ["X-Auth-Request-User: alice", "X-Auth-Request-Groups: user"]
    assert re.fullmatch(r"X-Auth-Request-Expires: \d{10}", lines[2])
    assert lines[3:] == [
        "403",
        '{"message":"the check takes no query, role=user or role=admin"}',
        "400",
    ]
