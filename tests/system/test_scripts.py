"""The curl scripts in scripts/: green against a live gunicorn, one-line failures otherwise."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.auth.keys import load_key_ring
from app.auth.tokens import issue_cookie_token
from tests.helpers.servers import free_port
from tests.helpers.tools import ROOT, require_tool, which

# The scripts check HTTP answers, the same on every store: one backend is enough.
pytestmark = [pytest.mark.gunicorn, pytest.mark.store("sqlite")]

SCRIPTS = ROOT / "scripts"
#: Token-shaped inputs for the scripts pointed at a wrong service; never to be echoed.
ACCESS = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJlc2lnbmF0dXJl"
REFRESH = "R3fr3shT0k3nR3fr3shT0k3nR3fr3shT0k3nR3fr3s"
COOKIE = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOnt9fQ.Y29va2llY29va2llY29va2ll"

#: A registered client's credentials, for the OAuth scripts; never to be echoed.
CLIENT = {"CLIENT_ID": "billing", "CLIENT_SECRET": "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2Vj"}

#: Every script, once per expectation it can be asked for, with the inputs it needs.
INVOCATIONS = [
    ("health.sh", [], {}),
    ("login.sh", ["alice", "any"], {}),
    ("refresh.sh", ["alice", REFRESH], {}),
    ("refresh.sh", ["alice", REFRESH], {"EXPECT": "unauthorized"}),
    ("revoke.sh", [REFRESH], {}),
    ("reservation.sh", ["4"], {"ACCESS_TOKEN": ACCESS}),
    ("reservation.sh", [], {"EXPECT": "unauthorized"}),
    ("user-resource.sh", [], {"ACCESS_TOKEN": ACCESS}),
    ("user-resource.sh", [], {"EXPECT": "unauthorized"}),
    ("admin-resource.sh", [], {"ACCESS_TOKEN": ACCESS}),
    ("admin-resource.sh", [], {"ACCESS_TOKEN": ACCESS, "EXPECT": "denied"}),
    ("admin-resource.sh", [], {"ACCESS_TOKEN": ACCESS, "EXPECT": "unauthorized"}),
    ("me.sh", [], {"AUTH_COOKIE": COOKIE}),
    ("me.sh", [], {"EXPECT": "unauthorized"}),
    ("logout.sh", [], {}),
    ("metrics.sh", [], {}),
    # the OAuth scripts, green in tests/system/test_oauth_clients.py (a server with clients)
    ("oauth-metadata.sh", [], {}),
    ("client-token.sh", [], CLIENT),
    ("introspect.sh", [ACCESS], CLIENT),
    ("oauth-revoke.sh", [REFRESH], {}),
    ("sessions.sh", [], {"ACCESS_TOKEN": ACCESS}),
    ("sessions.sh", [], {"ACCESS_TOKEN": ACCESS, "SESSIONS_USER": "bob", "EXPECT": "denied"}),
    ("sessions.sh", [], {"EXPECT": "unauthorized"}),
    ("end-session.sh", ["AAAAAAAAAAAAAAAAAAAAAA"], {"ACCESS_TOKEN": ACCESS}),
    ("end-session.sh", ["AAAAAAAAAAAAAAAAAAAAAA"], {"ACCESS_TOKEN": ACCESS, "EXPECT": "unknown"}),
    ("log-out-everywhere.sh", [], {"ACCESS_TOKEN": ACCESS}),
]


@pytest.fixture(autouse=True)
def curl_and_jq() -> None:
    require_tool(bool(which("curl") and which("jq")), "curl and jq", "apt-get install curl jq")


def run(script: str, *args: str, base_url: str, **env: str) -> subprocess.CompletedProcess:
    """Run one script with only PATH, BASE_URL and ``env`` in its environment."""
    return subprocess.run(
        ["bash", str(SCRIPTS / script), *args],
        env={"PATH": "/usr/bin:/bin", "BASE_URL": base_url, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_one_line_failure(result: subprocess.CompletedProcess, status: int = 1) -> str:
    assert result.returncode == status, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.endswith("\n")
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr[:-1].isprintable(), result.stderr
    return result.stderr


# --- usage, without a request ---------------------------------------------------------

#: Every script one runs (lib.sh is sourced by them).
RUNNABLE = sorted(path.name for path in SCRIPTS.glob("*.sh") if path.name != "lib.sh")
#: Nothing listens there: a script that sent a request would fail with "no answer".
NOWHERE = "http://127.0.0.1:9"


@pytest.mark.parametrize("script", RUNNABLE)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_script_answers_help_with_its_usage_and_sends_nothing(script, flag):
    result = run(script, flag, base_url=NOWHERE, LOGIN_USERNAME="", ACCESS_TOKEN=ACCESS)
    assert (result.returncode, result.stderr) == (0, "")
    header = (SCRIPTS / script).read_text().splitlines()[1].removeprefix("# ")
    assert result.stdout.splitlines()[0] == header
    assert "shellcheck" not in result.stdout
    assert "BASE_URL" in result.stdout


@pytest.mark.parametrize("script", RUNNABLE)
def test_an_unknown_option_is_a_usage_error_never_a_value(script):
    result = run(script, "--user", base_url=NOWHERE, ACCESS_TOKEN=ACCESS, REFRESH_TOKEN=REFRESH)
    assert assert_one_line_failure(result, status=2).startswith("usage: ")
    assert "--help" in result.stderr


def test_a_value_starting_with_a_dash_follows_a_double_dash():
    result = run("login.sh", "--", "-bob", base_url=NOWHERE)
    # the login was sent (and found nobody), not refused as an option
    message = assert_one_line_failure(result)
    assert message.startswith(f"login.sh: POST /login: no answer from {NOWHERE}")


# --- green against the real service -------------------------------------------------


def test_every_script_is_exercised():
    shipped = {path.name for path in SCRIPTS.glob("*.sh")} - {"lib.sh", "walkthrough.sh"}
    assert shipped == {script for script, _, _ in INVOCATIONS}


def test_every_script_passes_in_a_realistic_session(gunicorn_server, tmp_path):
    server = gunicorn_server(workers=2)

    def ok(script: str, *args: str, **env: str) -> str:
        result = run(script, *args, base_url=server.url, **env)
        assert (result.returncode, result.stderr) == (0, ""), script
        return result.stdout

    assert ok("health.sh") == '{"status":"ok"}\n{"status":"ready"}\n'
    assert "# TYPE token_service_tokens_total counter" in ok("metrics.sh")

    tokens = json.loads(ok("login.sh", LOGIN_USERNAME="alice", LOGIN_PASSWORD="secret"))
    alice = {"ACCESS_TOKEN": tokens["accessToken"]}
    assert json.loads(ok("user-resource.sh", **alice))["user"]["username"] == "alice"
    reservation = json.loads(ok("reservation.sh", "3", **alice))
    assert (reservation["guestsCount"], reservation["user"]["username"]) == (3, "alice")
    assert ok("reservation.sh", GUESTS_COUNT="2.5", **alice).endswith('"guestsCount":2.5}\n')
    assert ok("admin-resource.sh", EXPECT="denied", **alice) == '{"message":"No access"}\n'
    assert ok("admin-resource.sh", EXPECT="unauthorized") == "Unauthorized\n"
    assert ok("user-resource.sh", EXPECT="unauthorized", ACCESS_TOKEN=REFRESH) == "Unauthorized\n"
    assert ok("reservation.sh", EXPECT="unauthorized") == "Unauthorized\n"

    admin = {"ACCESS_TOKEN": json.loads(ok("login.sh", "admin"))["accessToken"]}
    assert json.loads(ok("admin-resource.sh", **admin))["user"]["role"] == "admin"

    refreshed = json.loads(ok("refresh.sh", "alice", tokens["refreshToken"]))
    assert set(refreshed) == {"accessToken"}
    ok("user-resource.sh", ACCESS_TOKEN=refreshed["accessToken"])
    assert ok("revoke.sh", REFRESH_TOKEN=tokens["refreshToken"]) == ""
    revoked = {"LOGIN_USERNAME": "alice", "REFRESH_TOKEN": tokens["refreshToken"]}
    assert ok("refresh.sh", EXPECT="unauthorized", **revoked) == "Unauthorized\n"
    assert ok("revoke.sh", tokens["refreshToken"]) == ""  # 204 for an unknown token too

    # The third-party login's cookie token, as the callback would have set it.
    secret = (tmp_path / "instance" / "signing_secret").read_text().strip()
    user = {"source": "corp", "id": "u-1", "shownName": "Ann"}
    cookie = issue_cookie_token(user, load_key_ring(secret), 60)
    assert json.loads(ok("me.sh", AUTH_COOKIE=cookie)) == user
    jar = tmp_path / "jar"
    jar.write_text(f"127.0.0.1\tFALSE\t/\tFALSE\t0\tjwt\t{cookie}\n")
    assert json.loads(ok("me.sh", COOKIE_JAR=str(jar))) == user
    assert ok("me.sh", EXPECT="unauthorized", **alice) == "Unauthorized\n"  # no Bearer here
    assert ok("logout.sh", COOKIE_JAR=str(jar)) == ""
    assert cookie not in jar.read_text()  # curl dropped the cleared cookie from the jar
    assert ok("logout.sh") == ""


def test_the_session_scripts_list_end_and_log_out_everywhere(gunicorn_server):
    server = gunicorn_server(workers=1)  # a logout everywhere is seen at once

    def ok(script: str, *args: str, **env: str) -> str:
        result = run(script, *args, base_url=server.url, **env)
        assert (result.returncode, result.stderr) == (0, ""), script
        return result.stdout

    first = json.loads(ok("login.sh", "bob"))
    ok("login.sh", "bob")
    bob = {"ACCESS_TOKEN": first["accessToken"]}
    admin = {"ACCESS_TOKEN": json.loads(ok("login.sh", "admin"))["accessToken"]}
    page = json.loads(ok("sessions.sh", LIMIT="1", **bob))
    assert (len(page["sessions"]), type(page["next"])) == (1, str)
    rest = json.loads(ok("sessions.sh", AFTER=page["next"], **bob))
    assert (len(rest["sessions"]), rest["next"]) == (1, None)
    listed = json.loads(ok("sessions.sh", SESSIONS_USER="bob", **admin))["sessions"]
    assert [session["id"] for session in listed] == [
        session["id"] for session in page["sessions"] + rest["sessions"]
    ]
    assert ok("sessions.sh", SESSIONS_USER="bob", EXPECT="denied", **bob) == (
        '{"message":"No access"}\n'
    )
    assert ok("sessions.sh", EXPECT="unauthorized") == "Unauthorized\n"

    newest = listed[0]["id"]
    assert ok("end-session.sh", newest, **bob) == ""
    unknown = ok("end-session.sh", newest, SESSIONS_USER="bob", EXPECT="unknown", **admin)
    assert unknown == '{"message":"no such session"}\n'
    left = json.loads(ok("sessions.sh", **bob))["sessions"]
    assert [session["id"] for session in left] == [listed[1]["id"]]
    assert json.loads(ok("log-out-everywhere.sh", SESSIONS_USER="bob", **admin)) == {"ended": 1}
    assert ok("sessions.sh", EXPECT="unauthorized", **bob) == "Unauthorized\n"
    assert json.loads(ok("log-out-everywhere.sh", **admin)) == {"ended": 1}


@pytest.mark.parametrize(
    ("script", "inputs", "reason"),
    [
        ("admin-resource.sh", {"EXPECT": "ok"}, "expected 200, got 403"),
        ("admin-resource.sh", {"EXPECT": "unauthorized"}, "expected 401, got 403"),
        ("user-resource.sh", {"ACCESS_TOKEN": ACCESS}, 'got 401 text/plain "Unauthorized"'),
        ("refresh.sh", {"LOGIN_USERNAME": "bob"}, "401: the refresh token is revoked"),
        ("refresh.sh", {"REFRESH_TOKEN": REFRESH}, "401: the refresh token is revoked"),
        ("me.sh", {"AUTH_COOKIE": COOKIE}, 'expected 200, got 401 text/plain "Unauthorized"'),
    ],
)
def test_an_answer_other_than_the_expected_one_fails(shared_gunicorn, script, inputs, reason):
    server = shared_gunicorn(workers=1)  # each case logs in its own tokens
    login = run("login.sh", "alice", base_url=server.url)
    tokens = json.loads(login.stdout)
    env = {
        "ACCESS_TOKEN": tokens["accessToken"],
        "LOGIN_USERNAME": "alice",
        "REFRESH_TOKEN": tokens["refreshToken"],
    }
    env.update(inputs)
    stderr = assert_one_line_failure(run(script, base_url=server.url, **env))
    assert stderr.startswith(f"{script}: ")
    assert reason in stderr
    for secret in (tokens["accessToken"], tokens["refreshToken"], ACCESS, REFRESH, COOKIE):
        assert secret not in stderr


def test_health_fails_when_the_token_store_is_down(gunicorn_server):
    server = gunicorn_server({"TOKEN_STORE_URL": f"redis://127.0.0.1:{free_port()}/0"}, workers=1)
    stderr = assert_one_line_failure(run("health.sh", base_url=server.url))
    assert stderr.startswith("health.sh: GET /readyz: expected 200, got 503 application/json")


# --- one-line failures against services that answer wrongly ---------------------------


class WrongService(BaseHTTPRequestHandler):
    """Answer every request with the same wrong answer, whatever its method and path."""

    answer: tuple[int, str, bytes] = (200, "text/html", b"<html>hello</html>")

    def answer_wrongly(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, content_type, body = self.answer
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = answer_wrongly  # noqa: N815 (http.server names)

    def log_message(self, *args) -> None:  # keep the test output quiet
        pass


WRONG_ANSWERS = {
    "html page": (200, "text/html; charset=utf-8", b"<!doctype html><p>Welcome to nginx!</p>\n"),
    "other JSON": (200, "application/json", b'{"unexpected": "shape"}\n'),
    "JSON with a wrong type": (200, "application/json", b"[1, 2]\n"),
    "hostile error": (
        500,
        "application/json",
        json.dumps({"message": "line one\nline two \x1b[31mred"}).encode(),
    ),
    "empty 200": (200, "text/plain", b""),
}


@pytest.fixture(scope="module", params=["stopped service", *WRONG_ANSWERS])
def wrong_service(request) -> Iterator[str]:
    """Return the URL of a service that answers wrongly, or of a port nothing listens on."""
    if request.param == "stopped service":
        with socket.socket() as bound:  # bound, never listening: every connection is refused
            bound.bind(("127.0.0.1", 0))
            yield f"http://127.0.0.1:{bound.getsockname()[1]}"
        return
    handler = type("Handler", (WrongService,), {"answer": WRONG_ANSWERS[request.param]})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    # serve_forever notices shutdown() only between polls: a short poll stops it at once
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
    )
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(10)


@pytest.mark.parametrize(
    ("script", "args", "env"),
    INVOCATIONS,
    ids=[f"{script}-{env.get('EXPECT', 'ok')}" for script, _, env in INVOCATIONS],
)
def test_a_wrong_service_fails_the_script_with_one_line(wrong_service, script, args, env):
    stderr = assert_one_line_failure(run(script, *args, base_url=wrong_service, **env))
    assert stderr.startswith(f"{script}: ")
    for secret in (ACCESS, REFRESH, COOKIE, CLIENT["CLIENT_SECRET"]):
        assert secret not in stderr
    assert "\x1b" not in stderr


@pytest.mark.parametrize(
    ("script", "args", "env"),
    [
        ("login.sh", [], {}),
        ("refresh.sh", ["alice"], {}),
        ("revoke.sh", [], {}),
        ("reservation.sh", ["four"], {"ACCESS_TOKEN": ACCESS}),
        ("reservation.sh", ["4"], {}),
        ("user-resource.sh", [], {"ACCESS_TOKEN": "two words"}),
        ("admin-resource.sh", [], {"ACCESS_TOKEN": ACCESS, "EXPECT": "maybe"}),
        ("me.sh", [], {}),
        ("me.sh", [], {"COOKIE_JAR": "/nonexistent/jar"}),
        ("logout.sh", [], {"AUTH_COOKIE_NAME": "a;b"}),
        ("client-token.sh", [], {"CLIENT_ID": "billing"}),
        ("introspect.sh", [], CLIENT),
        ("introspect.sh", [ACCESS], {}),
        ("oauth-revoke.sh", [], {}),
        ("health.sh", [], {"BASE_URL": "file:///etc/passwd"}),
        ("health.sh", [], {"BASE_URL": "http://127.0.0.1:1/\noutput = /tmp/x"}),
    ],
)
def test_missing_or_bad_inputs_are_a_one_line_usage_error(script, args, env):
    stderr = assert_one_line_failure(
        run(script, *args, base_url=f"http://127.0.0.1:{free_port()}", **env), status=2
    )
    assert stderr.startswith("usage: ")
