"""Signing keys on real gunicorns: the published JWKS verifies a login's token, a key
rotates across two instances, and workers and servers starting together make one key."""

from __future__ import annotations

import threading

import jwt
import pytest

from app.auth.keys import load_key_ring
from app.auth.tokens import issue_cookie_token
from tests.helpers.apps import new_key_file
from tests.helpers.servers import fresh
from tests.helpers.tokens import bearer

USER = {"source": "corp", "id": "248289761001", "shownName": "Jane Doe"}


@pytest.mark.gunicorn
@pytest.mark.parametrize("algorithm", ["EdDSA", "ES256"])
def test_a_login_token_verifies_with_pyjwt_from_the_published_jwks_alone(
    gunicorn_server, algorithm
):
    server = gunicorn_server({"SIGNING_ALGORITHM": algorithm}, workers=2)
    token = fresh("POST", f"{server.url}/login", json={"username": "admin"}).json()["accessToken"]
    client = jwt.PyJWKClient(f"{server.url}/.well-known/jwks.json", cache_keys=False)
    verifying_key = client.get_signing_key_from_jwt(token)
    assert verifying_key.algorithm_name == algorithm
    claims = jwt.decode(token, verifying_key, algorithms=[algorithm])
    assert (claims["username"], claims["role"]) == ("admin", "admin")


@pytest.mark.gunicorn
def test_rotation_across_two_instances(gunicorn_server, tmp_path):
    key_1 = new_key_file(tmp_path / "key-1.pem", "EdDSA")
    key_2 = new_key_file(tmp_path / "key-2.pem", "EdDSA")
    a = gunicorn_server({"SIGNING_ALGORITHM": "EdDSA", "SIGNING_KEY_FILE": str(key_1)}, workers=2)
    b = gunicorn_server(
        {
            "SIGNING_ALGORITHM": "EdDSA",
            "SIGNING_KEY_FILE": str(key_2),
            "SIGNING_KEY_FILE_PREVIOUS": str(key_1),
        },
        workers=2,
    )
    tokens = fresh("POST", f"{a.url}/login", json={"username": "alice"}).json()
    assert fresh("GET", f"{b.url}/user-accessible", headers=bearer(tokens["accessToken"])).ok
    kid_1 = jwt.get_unverified_header(tokens["accessToken"])["kid"]
    b_token = fresh("POST", f"{b.url}/token", json={"username": "alice", **tokens}).json()
    kid_2 = jwt.get_unverified_header(b_token["accessToken"])["kid"]
    jwks = fresh("GET", f"{b.url}/.well-known/jwks.json").json()
    assert [key["kid"] for key in jwks["keys"]] == [kid_2, kid_1]
    # A does not know key 2 yet: B's tokens are 401 there until A is rotated too
    response = fresh("GET", f"{a.url}/user-accessible", headers=bearer(b_token["accessToken"]))
    assert response.status_code == 401
    cookie = issue_cookie_token(USER, load_key_ring("x" * 32, "EdDSA", key_file=str(key_1)), 60)
    assert fresh("GET", f"{b.url}/api/v1/me", cookies={"jwt": cookie}).json() == USER


@pytest.mark.gunicorn
def test_workers_and_servers_starting_together_generate_one_key(gunicorn_server, tmp_path):
    env = {"SIGNING_ALGORITHM": "EdDSA"}  # no key file: generated into the shared instance
    servers = [gunicorn_server(env, workers=3, run=False) for _ in range(2)]
    threads = [threading.Thread(target=server.start) for server in servers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    kids = set()
    for server in servers:
        for _ in range(8):  # new connections: any worker may answer
            token = fresh("POST", f"{server.url}/login", json={"username": "u"}).json()
            kids.add(jwt.get_unverified_header(token["accessToken"])["kid"])
            jwks = fresh("GET", f"{server.url}/.well-known/jwks.json").json()
            kids.update(key["kid"] for key in jwks["keys"])
    key_files = [path.name for path in (tmp_path / "instance").iterdir() if "key" in path.name]
    assert key_files == ["signing_key_eddsa.pem"]
    key_file = str(tmp_path / "instance" / "signing_key_eddsa.pem")
    assert kids == {load_key_ring("x" * 32, "EdDSA", key_file=key_file).current.kid}
