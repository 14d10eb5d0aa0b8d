"""The request log: one line per request with every field, a request id on every answer,
and never a credential, on any endpoint, however the client spells it."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import sys
import time

import pytest
from flask import redirect
from gunicorn.glogging import Logger as GunicornLogger
from hypothesis import given, settings
from hypothesis import strategies as st

from app.http.request_log import MAX_REQUEST_ID_LENGTH
from app.observability.logging_config import ServiceGunicornLogger
from tests.helpers.tokens import TOKEN_SPELLINGS, bearer, login, make_token, valid_claims
from tests.helpers.tools import ROOT

TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
GENERATED_ID = re.compile(r"[0-9a-f]{32}")
PASSWORD = "hunter2-not-for-logs"
OTHER_KEYS_TOKEN = make_token("another-secret-that-is-long-enough-32b", valid_claims())
FIELDS = {
    "time", "level", "logger", "method", "path", "status", "duration_ms", "bytes", "client",
    "user", "request_id",
}  # fmt: skip


def request_lines(capfd) -> list[dict]:
    """Return the request log's lines written since the last call, parsed."""
    out = capfd.readouterr().out
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def last_line(capfd) -> dict:
    lines = request_lines(capfd)
    assert len(lines) == 1, lines
    return lines[0]


def test_one_json_line_per_request_with_every_field(client, capfd):
    before = time.time()
    response = client.post(
        "/login", json={"username": "alice", "password": PASSWORD}, headers={"X-Request-ID": "r-1"}
    )
    line = last_line(capfd)
    assert set(line) == FIELDS | {"event"}  # a login is a security event
    assert line["event"] == "login"
    assert TIME.fullmatch(line["time"])
    logged = time.mktime(time.strptime(line["time"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
    assert before - 1 <= logged <= time.time()
    assert line["level"] == "INFO"
    assert line["logger"] == "request"
    assert line["method"] == "POST"
    assert line["path"] == "/login"
    assert line["status"] == 200
    assert isinstance(line["duration_ms"], float)
    assert 0 < line["duration_ms"] < 60_000
    assert line["bytes"] == len(response.data)
    assert line["client"] == "127.0.0.1"
    assert line["user"] == "alice"
    assert line["request_id"] == "r-1" == response.headers["X-Request-ID"]


def test_user_is_the_authenticated_one_and_null_without_one(client, capfd):
    token = login(client, "bob")["accessToken"]
    request_lines(capfd)
    client.get("/user-accessible", headers=bearer(token))
    assert last_line(capfd)["user"] == "bob"
    client.get("/healthz")
    assert last_line(capfd)["user"] is None
    client.get("/user-accessible")
    line = last_line(capfd)
    assert (line["status"], line["user"], line["reason"]) == (401, None, "missing")


def test_user_is_the_cookie_user_on_api_v1_me(client, capfd, signing_key):
    from app.auth.tokens import issue_cookie_token

    cookie = issue_cookie_token(
        {"source": "corp", "id": "u-42", "shownName": "A"}, signing_key.ring, 60
    )
    client.set_cookie("jwt", cookie)
    assert client.get("/api/v1/me").status_code == 200
    assert last_line(capfd)["user"] == "u-42"
    assert cookie not in capfd.readouterr().err


@pytest.mark.parametrize(
    ("call", "status", "reason"),
    [
        (lambda c, t: c.get("/user-accessible"), 401, "missing"),
        (lambda c, t: c.get("/user-accessible", headers={"Authorization": "Basic x"}), 401,
         "malformed"),
        (lambda c, t: c.get("/user-accessible", headers=bearer("not.a.jwt")), 401, "malformed"),
        (lambda c, t: c.get("/user-accessible", headers=bearer(OTHER_KEYS_TOKEN)), 401,
         "bad_signature"),
        (lambda c, t: c.get("/admin-accessible", headers=bearer(t)), 403, "wrong_role"),
        (lambda c, t: c.post("/token", json={"username": "alice", "refreshToken": "x"}), 401,
         "unknown_refresh_token"),
    ],
)  # fmt: skip
def test_refused_requests_say_why(client, capfd, call, status, reason):
    token = login(client, "alice")["accessToken"]
    request_lines(capfd)
    assert call(client, token).status_code == status
    line = last_line(capfd)
    assert (line["status"], line["reason"]) == (status, reason)


def test_expired_token_is_logged_as_expired(client, capfd, signing_secret):
    now = int(time.time())
    token = make_token(signing_secret, valid_claims(iat=now - 120, exp=now - 1))
    client.get("/user-accessible", headers=bearer(token))
    assert last_line(capfd)["reason"] == "expired"


def test_refresh_with_another_users_token_is_logged_as_such(client, capfd):
    tokens = login(client, "alice")
    request_lines(capfd)
    client.post("/token", json={"username": "bob", "refreshToken": tokens["refreshToken"]})
    line = last_line(capfd)
    assert (line["user"], line["reason"]) == (None, "another_users_token")


def test_revoke_logs_the_digest_prefix_of_a_known_token_only(client, capfd):
    import hashlib

    token = login(client)["refreshToken"]
    request_lines(capfd)
    client.delete(f"/token/{token}")
    assert last_line(capfd)["revoked"] == hashlib.sha256(token.encode()).hexdigest()[:12]
    client.delete(f"/token/{token}")
    assert "revoked" not in last_line(capfd)


def test_text_format_is_one_readable_line(make_app, capfd):
    client = make_app(LOG_FORMAT="text").test_client()
    client.post("/login", json={"username": "Zoë Q", "password": PASSWORD})
    client.delete("/token/" + "x" * 42, headers={"X-Request-ID": "t-1"})
    out = capfd.readouterr().out.splitlines()
    assert len(out) == 2, out
    assert re.fullmatch(
        r"\S+Z INFO request 127\.0\.0\.1 \"POST /login\" 200 \d+B \d+\.\d{3}ms "
        r'user="Zoë Q" request_id=[0-9a-f]{32} event=login',
        out[0],
    ), out[0]
    assert TIME.fullmatch(out[0].split()[0])
    assert re.fullmatch(
        r'\S+ INFO request 127\.0\.0\.1 "DELETE /token/<redacted>" 204 0B \S+ms user=- '
        r"request_id=t-1 event=revoke",
        out[1],
    ), out[1]


def test_text_format_escapes_what_could_forge_a_line(make_app, capfd):
    client = make_app(LOG_FORMAT="text").test_client()
    client.get('/nope%0A2026-01-01T00:00:00.000Z%20INFO%20request%20"forged"')
    out = capfd.readouterr().out
    assert len(out.splitlines()) == 1
    assert '"GET /nope\\n2026-01-01T00:00:00.000Z INFO request \\"forged\\"" 404' in out


# --- no line can be forged ------------------------------------------------------------

#: The forwarded value of the security review: it appended a fake login to the line.
FORGED_LOGIN = '203.0.113.9 "POST /login" 200 336B 0.300ms user=admin event=login ##'
TEXT_LINE = re.compile(r"(?P<time>\S+) (?P<level>INFO|WARNING) request (?P<rest>.*)\n", re.DOTALL)
DECODER = json.JSONDecoder()


def read_word(text: str, at: int) -> tuple[str | None, int]:
    """Return the word of a text line starting at ``at`` (bare, or a JSON string) and its end."""
    if text[at] == '"':
        value, end = DECODER.raw_decode(text, at)
        return value, end
    end = text.find(" ", at)
    end = len(text) if end == -1 else end
    bare = text[at:end]
    return (None if bare == "-" else bare), end


def parse_text_line(line: str) -> dict:
    """Parse one request line of LOG_FORMAT=text back into its fields; fail if it is not one."""
    match = TEXT_LINE.fullmatch(line)
    assert match, line
    rest = match["rest"]
    client, at = read_word(rest, 0)
    assert rest[at : at + 2] == ' "', rest
    request, at = read_word(rest, at + 1)
    method, path = request.split(" ", 1)
    status, length, duration, rest = rest[at + 1 :].split(" ", 3)
    assert re.fullmatch(r"\d+B \d+\.\d{3}ms", f"{length} {duration}"), line
    fields = {"client": client, "method": method, "path": path, "status": int(status)}
    at = 0
    while at < len(rest):
        key_end = rest.index("=", at)
        key = rest[at:key_end]
        assert re.fullmatch(r"[a-z_]+", key), (key, line)
        assert key not in fields, (key, line)
        fields[key], at = read_word(rest, key_end + 1)
        assert at == len(rest) or rest[at] == " ", line
        at += 1
    return fields


def log_of(settings: dict[str, str], environ: dict, user: str | None = None) -> bytes:
    """Return what the service's middleware (proxy headers, request log) writes for one request."""
    from app.http.proxy import wrap_forwarded_headers
    from app.http.request_log import NOTES_KEY, RequestLog

    def view(environ: dict, start_response) -> list[bytes]:
        if user is not None:
            environ[NOTES_KEY]["user"] = user
        start_response("200 OK", [("Content-Length", "2")])
        return [b"{}"]

    read, write = os.pipe()
    try:
        log = RequestLog(view, text=settings.get("LOG_FORMAT") == "text", fd=write)
        proxies = tuple(
            ipaddress.ip_network(item)
            for item in settings.get("TRUSTED_PROXIES", "").split(",")
            if item
        )
        app = wrap_forwarded_headers(log, proxies, prefix=False)
        base = {"REQUEST_METHOD": "GET", "PATH_INFO": "/healthz", "REMOTE_ADDR": "127.0.0.1"}
        list(app({**base, **environ}, lambda status, headers, exc_info=None: None))
    finally:
        os.close(write)
    with os.fdopen(read, "rb") as pipe:
        return pipe.read()


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_the_reviews_forwarded_value_forges_no_login_line(log_format):
    out = log_of(
        {"LOG_FORMAT": log_format, "TRUSTED_PROXIES": "127.0.0.1/32"},
        {"HTTP_X_FORWARDED_FOR": FORGED_LOGIN},
    )
    assert len(out.splitlines()) == 1
    text = out.decode()
    fields = parse_text_line(text) if log_format == "text" else json.loads(text)
    # not an address: the request is the proxy's, and the value is not in the line at all
    assert (fields["client"], fields["path"], fields["user"]) == ("127.0.0.1", "/healthz", None)
    assert "admin" not in text
    assert "203.0.113.9" not in text


def test_a_client_address_that_is_no_word_is_quoted_in_the_text_line():
    # REMOTE_ADDR from a server that does not check it: the line still has one client field
    out = log_of({"LOG_FORMAT": "text"}, {"REMOTE_ADDR": FORGED_LOGIN}).decode()
    fields = parse_text_line(out)
    assert (fields["client"], fields["user"], "event" in fields) == (FORGED_LOGIN, None, False)
    assert out.split(" ")[3] == '"203.0.113.9'


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("alice", "alice"),
        ("Zoë", "Zoë"),
        ("-", '"-"'),
        ("", '""'),
        ("a b", '"a b"'),
        ("a=b", "a=b"),
        ('a"b', '"a\\"b"'),
        ("a\\b", '"a\\\\b"'),
        ("a\u2028b", '"a\\u2028b"'),
        ("a\x85b", '"a\\u0085b"'),
        ("a\x7fb", '"a\\u007fb"'),
        ("a\u202eb", '"a\\u202eb"'),
        ("\U000e0041", '"\\udb40\\udc41"'),
        ("\ud800", '"\\ud800"'),
    ],
)
def test_text_words_are_bare_when_plain_and_quoted_with_every_unprintable_escaped(value, shown):
    from app.observability.logging_config import word

    assert word(value) == shown
    assert read_word(shown, 0) == (value if value != "-" else "-", len(shown))


ANY_TEXT = st.text(max_size=80)
#: Paths as a server hands them over: UTF-8 bytes read as latin-1 (no lone surrogates).
PATH_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=80)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    forwarded=ANY_TEXT,
    path=PATH_TEXT,
    user=st.one_of(st.none(), st.text(max_size=41).filter(lambda user: "eyJ" not in user)),
    request_id=ANY_TEXT,
    trusted=st.booleans(),
)
def test_any_header_path_or_user_is_one_line_that_parses_back(
    forwarded, path, user, request_id, trusted
):
    from app.http.proxy import parse_address
    from app.http.request_log import redacted_path

    path = "/" + path
    environ = {
        "PATH_INFO": path.encode().decode("latin-1"),
        "HTTP_X_FORWARDED_FOR": forwarded,
        "HTTP_X_REQUEST_ID": request_id,
    }
    settings = {"TRUSTED_PROXIES": "127.0.0.1/32" if trusted else ""}
    text = log_of({**settings, "LOG_FORMAT": "text"}, environ, user)
    assert text.endswith(b"\n")
    assert len(text.decode().splitlines()) == 1, text
    line = log_of({**settings, "LOG_FORMAT": "json"}, environ, user)
    assert line.endswith(b"\n")
    assert len(line.splitlines()) == 1, line  # bytes: split at \n and \r, as JSON Lines are
    for fields in (parse_text_line(text.decode()), json.loads(line)):
        assert parse_address(fields["client"]) is not None  # only ever an IP address
        assert (fields["method"], fields["path"]) == ("GET", redacted_path(path)[:512])
        assert (fields["status"], fields["user"]) == (200, user)
        sane = re.fullmatch(r"[A-Za-z0-9._-]{1,128}", request_id) and request_id != "-"
        assert (
            fields["request_id"] == request_id
            if sane
            else GENERATED_ID.fullmatch(fields["request_id"])
        )
        assert set(fields) <= FIELDS | {"duration_ms", "bytes"}


# --- X-Request-ID -------------------------------------------------------------------


@pytest.mark.parametrize(
    "given", ["abc", "A.b-c_9", "x" * MAX_REQUEST_ID_LENGTH, "0123456789abcdef0123456789abcdef"]
)
def test_a_sane_request_id_is_echoed_and_logged(client, capfd, given):
    response = client.get("/healthz", headers={"X-Request-ID": given})
    assert response.headers["X-Request-ID"] == given
    assert last_line(capfd)["request_id"] == given


@pytest.mark.parametrize(
    "given",
    [
        "",
        "-",
        "x" * (MAX_REQUEST_ID_LENGTH + 1),
        "a b",
        "a\tb",
        "a/b",
        "a,b",
        "<script>",
        "é",
        "a\x00",
    ],
)
def test_an_insane_request_id_is_replaced_by_a_generated_one(client, capfd, given):
    response = client.get("/healthz", headers={"X-Request-ID": given})
    generated = response.headers["X-Request-ID"]
    assert GENERATED_ID.fullmatch(generated)
    assert last_line(capfd)["request_id"] == generated


def test_two_request_id_headers_are_replaced(client):
    response = client.get("/healthz", headers=[("X-Request-ID", "a"), ("X-Request-ID", "b")])
    assert GENERATED_ID.fullmatch(response.headers["X-Request-ID"])


def test_generated_request_ids_differ(client):
    ids = {client.get("/healthz").headers["X-Request-ID"] for _ in range(20)}
    assert len(ids) == 20


@pytest.fixture
def app_with_redirect(app):
    @app.get("/moved")
    def moved():
        return redirect("/healthz")

    return app


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status"),
    [
        ("get", "/user-accessible", {}, 401),
        ("post", "/token", {"json": {"username": "a", "refreshToken": "b"}}, 401),
        ("get", "/nope", {}, 404),
        ("put", "/login", {}, 405),
        ("post", "/login", {"data": "x" * 20_000, "content_type": "application/json"}, 413),
        ("post", "/login", {"data": "{", "content_type": "application/json"}, 400),
        ("post", "/login", {"data": "x", "content_type": "text/plain"}, 415),
        ("delete", "/token/abc", {}, 204),
        ("get", "/moved", {}, 302),
        ("get", "/auth/nobody/login", {}, 404),
    ],
)
def test_every_answer_carries_the_request_id(
    app_with_redirect, capfd, method, path, kwargs, status
):
    client = app_with_redirect.test_client()
    response = getattr(client, method)(path, headers={"X-Request-ID": "every-1"}, **kwargs)
    assert response.status_code == status
    assert response.headers.getlist("X-Request-ID") == ["every-1"]
    line = last_line(capfd)
    assert (line["status"], line["request_id"]) == (status, "every-1")


def test_403_carries_the_request_id(client, capfd):
    token = login(client)["accessToken"]
    response = client.get("/admin-accessible", headers={**bearer(token), "X-Request-ID": "f-1"})
    assert (response.status_code, response.headers["X-Request-ID"]) == (403, "f-1")


def test_an_unexpected_error_is_logged_500_with_its_request_id(app, capfd):
    @app.get("/boom")
    def boom():
        raise RuntimeError("bug")

    response = app.test_client().get("/boom", headers={"X-Request-ID": "boom-1"})
    assert (response.status_code, response.headers["X-Request-ID"]) == (500, "boom-1")
    line = last_line(capfd)
    assert (line["status"], line["request_id"]) == (500, "boom-1")


# --- no credential in any line --------------------------------------------------------


@pytest.mark.parametrize("spelling", TOKEN_SPELLINGS)
def test_revoke_path_is_redacted_however_spelled(client, capfd, spelling):
    token = login(client)["refreshToken"]
    request_lines(capfd)
    response = client.delete(spelling.format(t=token))
    assert response.status_code == 204
    captured = capfd.readouterr()
    assert token not in captured.out + captured.err
    line = json.loads(captured.out)
    assert line["path"] == "/token/<redacted>"
    if not spelling.startswith("/token//") and not spelling.endswith("/"):
        refresh = client.post("/token", json={"username": "alice", "refreshToken": token})
        assert refresh.status_code == 401  # the very token was revoked


def test_no_credential_in_any_line_across_every_endpoint(
    client, capfd, signing_secret, signing_key
):
    from app.auth.tokens import issue_cookie_token

    secrets_seen = {PASSWORD, signing_secret}
    tokens = login(client, "alice", headers={"X-Request-ID": "x"})
    form = client.post("/login", data={"username": "bob", "password": PASSWORD}).get_json()
    secrets_seen |= set(tokens.values()) | set(form.values())
    access, refresh = tokens["accessToken"], tokens["refreshToken"]
    body = {"username": "alice", "refreshToken": refresh}
    renewed = client.post("/token", json=body).get_json()["accessToken"]
    secrets_seen.add(renewed)
    client.post("/token", data=body)
    client.post("/token", json={"username": "mallory", "refreshToken": refresh})
    client.post("/token", json={"username": access, "refreshToken": refresh})
    client.get("/user-accessible", headers=bearer(access))
    client.get("/admin-accessible", headers=bearer(access))
    client.get("/user-accessible", headers=bearer(access[:-3] + "abc"))
    client.post("/restaurant-reservation", headers=bearer(access), json={"guestsCount": 2})
    client.get(f"/user-accessible?access_token={access}&refresh_token={refresh}")
    client.get(f"/auth/corp/callback?code=auth-code-123456&state=state-654321&x={refresh}")
    client.get(f"/{access}")
    client.get(f"/nope/{refresh}")
    cookie = issue_cookie_token({"source": "corp", "id": "u-1"}, signing_key.ring, 60)
    secrets_seen.add(cookie)
    client.set_cookie("jwt", cookie)
    client.get("/api/v1/me")
    client.post("/auth/logout")
    client.post("/login", json={"username": refresh, "password": PASSWORD})  # pasted by mistake
    for spelling in TOKEN_SPELLINGS:
        client.delete(spelling.format(t=refresh))
    captured = capfd.readouterr()
    output = captured.out + captured.err
    assert len(captured.out.splitlines()) >= 25
    for secret in secrets_seen:
        assert secret not in output
    assert "auth-code-123456" not in output
    assert "state-654321" not in output
    assert "eyJ" not in output


def test_gunicorn_builds_no_access_line_beside_the_request_log(monkeypatch):
    """gunicorn takes logconfig_dict as a wish for access lines and builds them (some 40
    atoms a request) even for a logger that writes nothing; the service's logger does not."""
    logger = ServiceGunicornLogger.__new__(ServiceGunicornLogger)  # setup() would reconfigure
    monkeypatch.setattr(GunicornLogger, "atoms", lambda *args: pytest.fail("atoms were built"))
    assert not logger.access_log_enabled
    assert logger.access(None, None, {}, None) is None


@pytest.mark.processes
def test_gunicorn_conf_uses_the_service_logger(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "--print-config", "wsgi:app"],
        cwd=ROOT, env={**os.environ, "INSTANCE_PATH": str(tmp_path / "instance")},
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    settings = dict(re.findall(r"^(\w+)\s+= ?(.*)$", completed.stdout, re.M))
    assert "ServiceGunicornLogger" in settings["logger_class"]
    assert settings["accesslog"] == "None"
