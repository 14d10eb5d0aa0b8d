"""A real multi-worker gunicorn: any worker honours any other's tokens, across restarts."""

from __future__ import annotations

import json
import socket
import stat
from concurrent.futures import ThreadPoolExecutor

import jwt
import pytest

from tests.conftest import fresh

pytestmark = pytest.mark.gunicorn

CYCLES = 200


def login_cycle(url: str, username: str) -> None:
    """Log in, call a protected endpoint, refresh, revoke, and check every answer."""
    response = fresh("POST", f"{url}/login", json={"username": username, "password": "pw"})
    assert response.status_code == 200, response.text
    tokens = response.json()
    bearer = {"Authorization": f"Bearer {tokens['accessToken']}"}
    response = fresh("GET", f"{url}/user-accessible", headers=bearer)
    assert response.status_code == 200, response.text
    assert response.json()["user"]["username"] == username
    body = {"username": username, "refreshToken": tokens["refreshToken"]}
    response = fresh("POST", f"{url}/token", data=body)
    assert response.status_code == 200, response.text
    bearer = {"Authorization": f"Bearer {response.json()['accessToken']}"}
    response = fresh(
        "POST", f"{url}/restaurant-reservation", headers=bearer, json={"guestsCount": 3}
    )
    assert response.json()["guestsCount"] == 3
    response = fresh("DELETE", f"{url}/token/{tokens['refreshToken']}")
    assert response.status_code == 204
    assert response.content == b""
    response = fresh("POST", f"{url}/token", json=body)
    assert response.status_code == 401
    assert response.text == "Unauthorized"


def test_every_worker_honours_every_other_workers_tokens(gunicorn_server, signing_secret):
    server = gunicorn_server({"SIGNING_SECRET": signing_secret}, workers=4)
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda n: login_cycle(server.url, f"user{n}"), range(CYCLES)))
    assert len(server.worker_pids()) == 4  # no worker died on the way


def test_tokens_survive_a_restart_with_the_generated_secret(gunicorn_server, tmp_path):
    server = gunicorn_server(workers=3)  # no SIGNING_SECRET: generated in the instance folder
    issued = [
        fresh("POST", f"{server.url}/login", json={"username": f"u{n}"}).json() for n in range(20)
    ]
    server.stop()
    restarted = gunicorn_server(workers=3)
    for n, tokens in enumerate(issued):
        bearer = {"Authorization": f"Bearer {tokens['accessToken']}"}
        response = fresh("GET", f"{restarted.url}/user-accessible", headers=bearer)
        assert response.status_code == 200
        body = {"username": f"u{n}", "refreshToken": tokens["refreshToken"]}
        assert fresh("POST", f"{restarted.url}/token", json=body).status_code == 200


def test_workers_starting_together_agree_on_the_generated_secret(gunicorn_server, tmp_path):
    server = gunicorn_server(workers=4)
    secret_file = tmp_path / "instance" / "signing_secret"
    secret = secret_file.read_text().strip()
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600

    def login_and_decode(n: int) -> str:
        token = fresh("POST", f"{server.url}/login", json={"username": f"u{n}"}).json()
        # every worker signed with the one secret on disk, or this raises
        return jwt.decode(token["accessToken"], secret, algorithms=["HS256"])["username"]

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert sorted(pool.map(login_and_decode, range(80))) == sorted(f"u{n}" for n in range(80))
    leftovers = [path.name for path in secret_file.parent.iterdir() if path.suffix == ".tmp"]
    assert leftovers == []


def test_request_log_never_shows_a_refresh_token_or_bearer_token(gunicorn_server, tmp_path):
    server = gunicorn_server(workers=2)
    tokens = fresh("POST", f"{server.url}/login", json={"username": "logged"}).json()
    bearer = {"Authorization": f"Bearer {tokens['accessToken']}"}
    fresh("GET", f"{server.url}/user-accessible", headers=bearer)
    fresh(
        "POST",
        f"{server.url}/token",
        json={"username": "x", "refreshToken": tokens["refreshToken"]},
    )
    assert fresh("DELETE", f"{server.url}/token/{tokens['refreshToken']}").status_code == 204
    server.stop()
    log = server.log_path.read_text()
    lines = [json.loads(line) for line in log.splitlines() if line.startswith('{"time"')]
    assert {"method": "DELETE", "path": "/token/<redacted>", "status": 204}.items() <= next(
        line.items() for line in lines if line.get("method") == "DELETE"
    )
    assert tokens["refreshToken"] not in log
    assert tokens["accessToken"] not in log


def test_oversized_header_is_a_4xx_not_a_5xx(gunicorn_server):
    server = gunicorn_server(workers=2)
    headers = {"Authorization": "Bearer " + "a" * 20000}
    response = fresh("GET", f"{server.url}/user-accessible", headers=headers)
    assert 400 <= response.status_code < 500


def test_bad_input_over_the_wire_is_json(gunicorn_server):
    server = gunicorn_server(workers=2)
    response = fresh(
        "POST", f"{server.url}/login", data="{", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert json.loads(response.text) == {"message": "request body is not valid JSON"}
    response = fresh(
        "POST",
        f"{server.url}/login",
        data="x" * 20000,
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 413


def raw_request(port: int, request: bytes) -> bytes:
    """Send raw bytes on a new connection; return everything the server answers."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(request)
        connection.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    return answer


def chunked_login(port: int, chunks: list[bytes], content_type: bytes) -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for chunk in chunks) + b"0\r\n\r\n"
    return raw_request(
        port,
        b"POST /login HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Type: " + content_type + b"\r\n\r\n" + body,
    )


def test_chunked_body_over_the_limit_is_413_over_the_wire(gunicorn_server):
    server = gunicorn_server(workers=1)
    chunks = [b"x=" + b"a" * 16367, b"&username=administrator"]
    answer = chunked_login(server.port, chunks, b"application/x-www-form-urlencoded")
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert answer.endswith(b'{"message":"request body is larger than 16384 bytes"}\n')
    answer = chunked_login(
        server.port, [b"username=", b"alice"], b"application/x-www-form-urlencoded"
    )
    assert answer.startswith(b"HTTP/1.1 200 ")


def test_malformed_chunk_framing_is_400_not_500(gunicorn_server):
    server = gunicorn_server(workers=1)
    answer = raw_request(
        server.port,
        b"POST /login HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Type: application/json\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    )
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b'{"message":"request body is malformed"}' in answer
    server.stop()
    assert "Traceback" not in server.log_path.read_text()


def test_logs_never_show_a_refresh_token_however_spelled(gunicorn_server):
    server = gunicorn_server(workers=1)
    token = fresh("POST", f"{server.url}/login", json={"username": "a"}).json()["refreshToken"]
    raw_request(
        server.port, b"DELETE /token/" + token.encode() + b"\x7f HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    answer = raw_request(
        server.port, f"DELETE /%74oken/{token} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    )
    assert answer.startswith(b"HTTP/1.1 204 ")
    server.stop()
    log = server.log_path.read_text()
    assert '"path":"/token/<redacted>","status":204' in log  # decoded as routed, then redacted
    assert token not in log


def test_connections_stay_open_between_requests(gunicorn_server):
    # gthread workers with keepalive: nginx's upstream keepalive (and any client) reuses them
    server = gunicorn_server(workers=2)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as connection:
        for _ in range(3):
            connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            while not answer.endswith(b'{"status":"ok"}\n'):
                chunk = connection.recv(65536)
                assert chunk, "the connection was closed after one request"
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200 ")
            assert b"Connection: close" not in answer
