"""USERS_FILE: /login checks passwords against Argon2id hashes; flask users add/remove/list."""

from __future__ import annotations

import json
import logging
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from argon2 import PasswordHasher, extract_parameters

from app.auth.users import HASHER, UserDirectory, change_users
from app.config.parsers import ConfigError
from tests.helpers.apps import load_settings
from tests.helpers.clock import ManualClock
from tests.helpers.openapi import assert_documented, document_of
from tests.helpers.tools import ROOT
from tests.helpers.users import write_users

pytestmark = pytest.mark.store("sqlite")  # the directory does not depend on the token store

PASSWORD = "correct horse battery"
#: Weaker than HASHER: a hash made with it is upgraded at its user's next login.
OLD_HASHER = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)


@pytest.fixture
def users_file(tmp_path) -> Path:
    folder = tmp_path / "users"
    folder.mkdir()
    return folder / "users.json"


@pytest.fixture
def directory_app(make_app, users_file):
    """Return a factory of apps whose USERS_FILE holds alice (PASSWORD)."""

    def make(**settings):
        if not users_file.exists():
            write_users(users_file, alice=PASSWORD)
        return make_app(USERS_FILE=str(users_file), **settings)

    return make


def log_in(client, username: str = "alice", password: str | None = PASSWORD, **kwargs):
    body = {"username": username}
    if password is not None:
        body["password"] = password
    return client.post("/login", json=body, **kwargs)


def request_lines(capfd) -> list[dict]:
    return [json.loads(line) for line in capfd.readouterr().out.splitlines() if line[:1] == "{"]


def assert_unauthorized(response) -> None:
    """The 401 of /token exactly: text/plain `Unauthorized`, no Bearer challenge."""
    assert response.status_code == 401
    assert response.headers["Content-Type"] == "text/plain"
    assert response.data == b"Unauthorized"
    assert "WWW-Authenticate" not in response.headers
    assert response.headers["Cache-Control"] == "no-store"


# --- /login ---------------------------------------------------------------------------


def test_the_right_password_logs_in(directory_app, signing_secret, capfd):
    response = log_in(directory_app().test_client())
    assert response.status_code == 200
    claims = jwt.decode(response.get_json()["accessToken"], signing_secret, algorithms=["HS256"])
    assert (claims["username"], claims["role"]) == ("alice", "user")
    (line,) = request_lines(capfd)
    assert (line["user"], line["event"]) == ("alice", "login")
    assert PASSWORD not in json.dumps(line)


def test_a_wrong_password_is_the_401_of_token(directory_app, capfd):
    client = directory_app().test_client()
    assert_unauthorized(log_in(client, password="wrong password"))
    assert_unauthorized(log_in(client, password=""))
    assert_unauthorized(log_in(client, password=PASSWORD.upper()))
    assert_unauthorized(log_in(client, "Alice"))  # usernames are case-sensitive
    lines = request_lines(capfd)
    assert [(line["user"], line["reason"], line["event"]) for line in lines] == [
        (None, "bad_credentials", "login_failed")
    ] * 4
    assert "wrong password" not in json.dumps(lines)


def test_an_unknown_user_is_the_same_401_and_its_name_is_not_logged(directory_app, capfd):
    client = directory_app().test_client()
    assert_unauthorized(log_in(client, "my-password-typed-as-name"))
    (line,) = request_lines(capfd)
    assert (line["user"], line["reason"], line["event"]) == (
        None,
        "bad_credentials",
        "login_failed",
    )
    assert "my-password" not in json.dumps(line)


def test_a_wrong_password_and_an_unknown_user_leave_the_same_traces(directory_app, capfd):
    """The answer, the request log's line (but for time, duration and id) and the metrics
    are the same: nothing tells whether a username exists."""
    client = directory_app().test_client()
    metrics_before = client.get("/metrics").get_data(as_text=True)
    capfd.readouterr()
    answers, lines = [], []
    for username in ("alice", "mallory"):
        response = log_in(client, username, "not the password")
        answers.append((response.status_code, response.data, sorted(response.headers.items())))
        (line,) = request_lines(capfd)
        lines.append(
            {k: v for k, v in line.items() if k not in {"time", "duration_ms", "request_id"}}
        )
    assert answers[0][:2] == answers[1][:2]
    assert [h for h in answers[0][2] if h[0] != "X-Request-ID"] == [
        h for h in answers[1][2] if h[0] != "X-Request-ID"
    ]
    assert lines[0] == lines[1]
    assert "alice" not in json.dumps(lines)
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'token_service_auth_failures_total{reason="bad_credentials"} 2.0' in metrics
    for leaked in ("unknown_user", "wrong_password"):
        assert leaked not in metrics_before + metrics


def test_a_missing_password_is_400_with_a_directory(directory_app):
    response = log_in(directory_app().test_client(), password=None)
    assert response.status_code == 400
    assert response.get_json() == {"message": "password is required"}


def test_forms_carry_the_password_too(directory_app):
    client = directory_app().test_client()
    assert (
        client.post("/login", data={"username": "alice", "password": PASSWORD}).status_code == 200
    )
    assert client.post("/login", data={"username": "alice", "password": "x"}).status_code == 401


def test_without_a_directory_any_password_logs_in(client):
    assert log_in(client, "anyone", "anything").status_code == 200
    assert log_in(client, "anyone", None).status_code == 200
    assert client.application.extensions["user_directory"] is None


def test_a_wrong_password_and_an_unknown_user_take_the_same_time(directory_app, monkeypatch):
    """Each is refused after exactly one Argon2 verification, with the same parameters (an
    unknown user refused at once would take about 1 % of one): the same work, whatever
    the machine's load, so answers cannot tell whether a username exists."""
    client = directory_app().test_client()
    directory = client.application.extensions["user_directory"]
    verified: list[str] = []

    class CountingHasher(PasswordHasher):
        def verify(self, hash: str | bytes, password: str | bytes) -> bool:
            verified.append(str(hash))
            return super().verify(hash, password)

    hasher = directory.hasher
    counting = CountingHasher(
        hasher.time_cost, hasher.memory_cost, hasher.parallelism, hasher.hash_len,
        hasher.salt_len, type=hasher.type,
    )  # fmt: skip
    monkeypatch.setattr(directory, "hasher", counting)
    checked = {}
    for kind, username in (("wrong password", "alice"), ("unknown user", "mallory")):
        verified.clear()
        assert log_in(client, username, "not the password").status_code == 401
        assert len(verified) == 1, (kind, verified)
        checked[kind] = verified[0]
    assert checked["wrong password"] != checked["unknown user"]  # the dummy hash
    expected = extract_parameters(HASHER.hash(PASSWORD))
    assert [extract_parameters(hashed) for hashed in checked.values()] == [expected, expected]


def test_a_hash_with_other_parameters_is_upgraded_at_login(directory_app, users_file):
    write_users(users_file, OLD_HASHER, alice=PASSWORD, bob="bobs password")
    client = directory_app().test_client()
    assert log_in(client, password="not it").status_code == 401  # a failure upgrades nothing
    assert extract_parameters(json.loads(users_file.read_text())["alice"]).memory_cost == 1024
    assert log_in(client).status_code == 200
    users = json.loads(users_file.read_text())
    upgraded = extract_parameters(users["alice"])
    assert (upgraded.time_cost, upgraded.memory_cost, upgraded.parallelism) == (2, 19456, 1)
    assert not HASHER.check_needs_rehash(users["alice"])
    assert extract_parameters(users["bob"]).memory_cost == 1024  # the others stay
    assert os.stat(users_file).st_mode & 0o777 == 0o600
    written = users_file.stat().st_mtime_ns
    assert log_in(client).status_code == 200  # the new hash verifies, and is not rewritten
    assert users_file.stat().st_mtime_ns == written
    assert log_in(client, password="not it").status_code == 401


def test_an_upgrade_leaves_a_password_changed_meanwhile(directory_app, users_file):
    write_users(users_file, OLD_HASHER, alice=PASSWORD)
    app = directory_app()
    directory: UserDirectory = app.extensions["user_directory"]
    old = json.loads(users_file.read_text())["alice"]
    change_users(str(users_file), lambda users: users.update(alice=HASHER.hash("new one!")) or True)
    directory._upgrade("alice", old, PASSWORD)  # the file no longer holds the hash verified
    assert HASHER.verify(json.loads(users_file.read_text())["alice"], "new one!")


# --- the file changes ------------------------------------------------------------------


def test_the_file_is_read_again_when_it_changes_at_most_once_a_second(directory_app, users_file):
    clock = ManualClock()
    app = directory_app(clock=clock)
    client = app.test_client()
    assert log_in(client, "bob", "bobs password").status_code == 401
    change_users(
        str(users_file), lambda users: users.update(bob=HASHER.hash("bobs password")) or True
    )
    clock.advance(0.9)
    assert log_in(client, "bob", "bobs password").status_code == 401  # not looked at yet
    clock.advance(0.1)
    assert log_in(client, "bob", "bobs password").status_code == 200
    change_users(str(users_file), lambda users: users.pop("alice") is not None)
    clock.advance(1)
    assert log_in(client).status_code == 401


def test_a_file_broken_while_running_keeps_the_users_read_before(directory_app, users_file, caplog):
    clock = ManualClock()
    app = directory_app(clock=clock)
    client = app.test_client()
    users_file.write_text('{"alice": ')
    caplog.set_level(logging.INFO)
    for _ in range(3):
        clock.advance(1)
        assert log_in(client).status_code == 200
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [
        f"USERS_FILE {users_file}: not JSON (Expecting value, line 1 column 11); expected"
        ' {"<username>": "<Argon2id hash>", ...}; the users read before stay'
    ]


def test_a_file_deleted_while_running_refuses_every_login_and_says_so_once(
    directory_app, users_file, caplog
):
    clock = ManualClock()
    app = directory_app(clock=clock)
    client = app.test_client()
    assert log_in(client).status_code == 200
    users_file.unlink()
    caplog.set_level(logging.WARNING)
    for _ in range(3):
        clock.advance(1)
        assert log_in(client).status_code == 401
    assert [r.getMessage() for r in caplog.records if r.name == "app.auth.users"] == [
        f"USERS_FILE {users_file} does not exist: every login is refused until"
        " `flask users add` creates it"
    ]


def test_a_missing_file_refuses_every_login_until_one_is_added(make_app, users_file, runner_for):
    clock = ManualClock()
    app = make_app(USERS_FILE=str(users_file), clock=clock)
    assert log_in(app.test_client()).status_code == 401
    result = runner_for(app).invoke(args=["users", "add", "alice"], input=PASSWORD + "\n")
    assert result.exit_code == 0, result.output
    clock.advance(1)
    assert log_in(app.test_client()).status_code == 200


@pytest.mark.parametrize(
    ("contents", "problem"),
    [
        (b'{"alice": ', "not JSON (Expecting value, line 1 column 11)"),
        (b"[]", 'expected one JSON object {"<username>": "<hash>"}'),
        (b'{"alice": "$2b$12$abc"}', "the hash of 'alice' is not an Argon2id hash"),
        (b'{"alice": 5}', "the hash of 'alice' is not an Argon2id hash"),
        (b'{"a": "x", "a": "y"}', "the user 'a' is listed twice"),
        (b'{"": "x"}', "a username is 1 to 256 characters"),
        (b'{"a\\nb": "x"}', "a username must not contain control characters"),
        (b'{"  ": "x"}', "a username must not be only whitespace"),
        (b'{"a\\u202eb": "x"}', "a username must not contain bidirectional text controls"),
        (b"\xff\xfe{}", "not UTF-8"),
    ],
)
def test_a_malformed_file_refuses_to_start(users_file, tmp_path, contents, problem):
    users_file.write_bytes(contents)
    with pytest.raises(ConfigError) as error:
        load_settings({"USERS_FILE": str(users_file), "INSTANCE_PATH": str(tmp_path)})
    assert str(error.value).startswith(f"USERS_FILE {users_file}: {problem}")


def test_an_argon2i_hash_is_refused(users_file, tmp_path):
    from argon2 import Type

    hashed = PasswordHasher(type=Type.I).hash(PASSWORD)
    users_file.write_text(json.dumps({"alice": hashed}))
    with pytest.raises(ConfigError, match="is not an Argon2id hash"):
        load_settings({"USERS_FILE": str(users_file), "INSTANCE_PATH": str(tmp_path)})


def test_a_users_file_in_a_missing_folder_refuses_to_start(tmp_path):
    with pytest.raises(ConfigError, match=f"USERS_FILE: the folder {tmp_path / 'no'} does not"):
        load_settings(
            {"USERS_FILE": str(tmp_path / "no" / "u.json"), "INSTANCE_PATH": str(tmp_path)}
        )


@pytest.mark.processes
@pytest.mark.parametrize(
    "command",
    [["-c", "import runpy; runpy.run_path('gunicorn.conf.py')"], ["-m", "flask", "users", "list"]],
)
def test_a_malformed_file_stops_gunicorn_and_flask_in_one_line(users_file, tmp_path, command):
    users_file.write_text("alice:$argon2id$v=19$...\n")
    env = {
        "PATH": os.environ["PATH"],
        "USERS_FILE": str(users_file),
        "INSTANCE_PATH": str(tmp_path),
        "FLASK_APP": "wsgi",
    }
    result = subprocess.run(
        [sys.executable, *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"configuration error: USERS_FILE {users_file}: not JSON (Expecting value, line 1"
        ' column 1); expected {"<username>": "<Argon2id hash>", ...}'
    ]


# --- flask users ----------------------------------------------------------------------


@pytest.fixture
def runner_for():
    return lambda app: app.test_cli_runner()


@pytest.fixture
def users_runner(make_app, users_file):
    app = make_app(USERS_FILE=str(users_file))
    return app, app.test_cli_runner()


def test_add_list_and_remove(users_runner, users_file, caplog):
    _, runner = users_runner
    caplog.set_level(logging.INFO)
    for name in ["bob", "alice", "Zoë Q"]:
        result = runner.invoke(args=["users", "add", name], input=f"{name} password\n")
        assert result.exit_code == 0
        assert result.stdout == f"added {name!r}; revoked 0 refresh tokens\n"
    assert os.stat(users_file).st_mode & 0o777 == 0o600
    assert runner.invoke(args=["users", "list"]).stdout == "Zoë Q\nalice\nbob\n"
    users = json.loads(users_file.read_text(encoding="utf-8"))
    assert HASHER.verify(users["Zoë Q"], "Zoë Q password")
    result = runner.invoke(args=["users", "remove", "bob"])
    assert (result.exit_code, result.stdout) == (0, "removed 'bob'; revoked 0 refresh tokens\n")
    assert runner.invoke(args=["users", "list"]).stdout == "Zoë Q\nalice\n"
    events = [(r.event, r.user) for r in caplog.records if hasattr(r, "event")]
    assert events == [
        ("user_added", "bob"),
        ("user_added", "alice"),
        ("user_added", "Zoë Q"),
        ("user_removed", "bob"),
    ]
    assert "password" not in " ".join(r.getMessage() for r in caplog.records)
    assert [path.name for path in users_file.parent.iterdir()] == ["users.json", "users.json.lock"]


def test_add_refuses_an_existing_user_unless_replace(users_runner, users_file, caplog):
    app, runner = users_runner
    assert runner.invoke(args=["users", "add", "alice"], input="first password\n").exit_code == 0
    result = runner.invoke(args=["users", "add", "alice"], input="second password\n")
    assert result.exit_code == 1
    assert "the user 'alice' exists; --replace sets a new password" in result.output
    caplog.set_level(logging.INFO)
    caplog.clear()
    result = runner.invoke(args=["users", "add", "--replace", "alice"], input="second password\n")
    assert result.exit_code == 0
    assert result.stdout == "new password for 'alice'; revoked 0 refresh tokens\n"
    assert [r.event for r in caplog.records if hasattr(r, "event")] == ["user_password_changed"]
    client = app.test_client()
    assert log_in(client, password="second password").status_code == 200
    assert log_in(client, password="first password").status_code == 401


@pytest.mark.parametrize(
    ("args", "stdin", "status", "message"),
    [
        (["add", "alice"], "short\n", 2, "the password must be at least 8 characters"),
        (["add", "alice"], "", 2, "the password must be at least 8 characters"),
        (["add", "alice"], "x" * 1025 + "\n", 2, "longer than 1024 characters"),
        (["add", "a\tb"], "long enough\n", 2, "a username must not contain control characters"),
        (["add", " "], "long enough\n", 2, "a username must not be only whitespace"),
        (["add", "a\u2028b"], "long enough\n", 2, "must not contain line or paragraph separators"),
        (["add", "x" * 257], "long enough\n", 2, "a username is 1 to 256 characters"),
        (["remove", "nobody"], "", 1, "no user 'nobody' in"),
    ],
)
def test_bad_input_is_refused_in_one_line(users_runner, users_file, args, stdin, status, message):
    _, runner = users_runner
    result = runner.invoke(args=["users", *args], input=stdin)
    assert result.exit_code == status, result.output
    assert message in result.output
    assert not users_file.exists() or "alice" not in users_file.read_text()


def test_replace_of_an_unknown_user_is_refused_and_adds_nobody(users_runner, users_file):
    _, runner = users_runner
    result = runner.invoke(args=["users", "add", "--replace", "alice"], input="long enough\n")
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == f"Error: no user 'alice' in {users_file}; add it without --replace\n"
    assert not users_file.exists() or "alice" not in users_file.read_text()
    assert runner.invoke(args=["users", "list"]).stdout == ""


@pytest.mark.parametrize("second", ["second password\n", "\n", "x"])
def test_add_refuses_more_than_one_line_on_stdin(users_runner, users_file, second):
    _, runner = users_runner
    result = runner.invoke(args=["users", "add", "alice"], input=f"first password\n{second}")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        "Error: give the password as one line on standard input; it has more than one\n"
    )
    assert not users_file.exists() or "alice" not in users_file.read_text()


def test_a_password_keeps_its_spaces_and_loses_only_the_line_end(users_runner, users_file):
    _, runner = users_runner
    assert runner.invoke(args=["users", "add", "alice"], input=" spaced out \r\n").exit_code == 0
    assert HASHER.verify(json.loads(users_file.read_text())["alice"], " spaced out ")


def test_users_commands_need_users_file(runner):
    result = runner.invoke(args=["users", "list"])
    assert result.exit_code == 1
    assert "USERS_FILE is not set" in result.output


@pytest.mark.processes
def test_add_on_a_terminal_asks_twice_and_hides_the_password(users_file, tmp_path):
    env = {
        "PATH": os.environ["PATH"],
        "USERS_FILE": str(users_file),
        "INSTANCE_PATH": str(tmp_path),
        "FLASK_APP": "wsgi",
    }
    terminal, process_side = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "flask", "users", "add", "carol"],
        cwd=ROOT,
        env=env,
        stdin=process_side,
        stdout=process_side,
        stderr=process_side,
        start_new_session=True,  # no other terminal than this one
    )
    os.close(process_side)
    shown = b""

    def read_until(text: bytes) -> None:
        nonlocal shown
        deadline = time.monotonic() + 30
        while text not in shown and time.monotonic() < deadline:
            if select.select([terminal], [], [], 1)[0]:
                try:
                    shown += os.read(terminal, 1024)
                except OSError:  # the process closed the terminal
                    break

    try:
        read_until(b"password: ")
        os.write(terminal, b"carols password\n")
        read_until(b"Repeat for confirmation: ")
        os.write(terminal, b"carols password\n")
        read_until(b"added 'carol'")
        assert process.wait(30) == 0, shown
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(terminal)
    assert b"carols password" not in shown  # never echoed
    assert HASHER.verify(json.loads(users_file.read_text())["carol"], "carols password")


@pytest.mark.processes
def test_flask_users_logs_one_event_line_in_the_service_format(users_file, tmp_path):
    env = {
        "PATH": os.environ["PATH"],
        "USERS_FILE": str(users_file),
        "INSTANCE_PATH": str(tmp_path),
        "FLASK_APP": "wsgi",
    }
    for args, stdin in [(["add", "dave"], "daves password\n"), (["remove", "dave"], "")]:
        result = subprocess.run(
            [sys.executable, "-m", "flask", "users", *args],
            cwd=ROOT,
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        (line,) = [json.loads(text) for text in result.stderr.splitlines()]
        assert line["event"] == {"add": "user_added", "remove": "user_removed"}[args[0]]
        assert (line["level"], line["logger"], line["user"]) == ("INFO", "app", "dave")
        assert "daves password" not in result.stderr + result.stdout


# --- a changed password or a removed user ends the user's sessions ---------------------

EVERY_STORE = pytest.mark.store("sqlite", "redis", "postgresql")


def refresh(client, username: str, refresh_token: str):
    return client.post("/token", json={"username": username, "refreshToken": refresh_token})


def refresh_tokens(client, username: str, password: str, count: int) -> list[str]:
    tokens = []
    for _ in range(count):
        response = log_in(client, username, password)
        assert response.status_code == 200, response.data
        tokens.append(response.get_json()["refreshToken"])
    return tokens


@EVERY_STORE
@pytest.mark.parametrize("rotation", ["off", "on"])
def test_a_new_password_or_a_removal_revokes_every_refresh_token_of_the_user(
    directory_app, users_file, rotation
):
    write_users(users_file, alice=PASSWORD, bob="bobs password")
    app = directory_app(REFRESH_TOKEN_ROTATION=rotation)
    client, runner = app.test_client(), app.test_cli_runner()
    alices = refresh_tokens(client, "alice", PASSWORD, 2)
    (bobs,) = refresh_tokens(client, "bob", "bobs password", 1)
    result = runner.invoke(args=["users", "add", "--replace", "alice"], input="new password\n")
    assert (result.exit_code, result.stdout) == (
        0,
        "new password for 'alice'; revoked 2 refresh tokens\n",
    )
    for token in alices:
        assert_unauthorized(refresh(client, "alice", token))
    response = refresh(client, "bob", bobs)
    assert response.status_code == 200
    bobs = response.get_json().get("refreshToken", bobs)
    result = runner.invoke(args=["users", "remove", "bob"])
    assert (result.exit_code, result.stdout) == (0, "removed 'bob'; revoked 1 refresh token\n")
    assert_unauthorized(refresh(client, "bob", bobs))
    assert app.extensions["token_store"].tokens_of("bob") == []


@EVERY_STORE
def test_adding_a_user_revokes_the_tokens_the_name_had_before(make_app, users_file):
    """Tokens that an open login (no USERS_FILE) gave anyone for a name are not the user's."""
    open_client = make_app().test_client()
    earlier = log_in(open_client, "alice", "anything").get_json()["refreshToken"]
    clock = ManualClock()
    app = make_app(USERS_FILE=str(users_file), clock=clock)
    result = app.test_cli_runner().invoke(args=["users", "add", "alice"], input=PASSWORD + "\n")
    assert (result.exit_code, result.stdout) == (0, "added 'alice'; revoked 1 refresh token\n")
    clock.advance(1)  # look at the file again now
    assert_unauthorized(refresh(app.test_client(), "alice", earlier))


@EVERY_STORE
@pytest.mark.parametrize("rotation", ["off", "on"])
def test_a_refresh_for_a_user_no_longer_in_the_directory_is_401(
    directory_app, users_file, rotation, capfd
):
    """Removed from the file by hand (no `flask users`): within the reload interval, the
    user's refresh tokens are refused, and the worker that reads the file logs the user out
    everywhere; back in the file, the user must log in again."""
    clock = ManualClock()
    app = directory_app(REFRESH_TOKEN_ROTATION=rotation, clock=clock)
    client = app.test_client()
    (token,) = refresh_tokens(client, "alice", PASSWORD, 1)
    hashed = json.loads(users_file.read_text())["alice"]
    change_users(str(users_file), lambda users: users.pop("alice") is not None)
    clock.advance(1)
    capfd.readouterr()
    assert_unauthorized(refresh(client, "alice", token))
    (line,) = request_lines(capfd)
    assert (line["user"], line["reason"], line["event"]) == (
        "alice",
        "user_not_in_directory",
        "refresh_failed",
    )
    change_users(str(users_file), lambda users: users.update(alice=hashed) or True)
    clock.advance(1)
    assert_unauthorized(refresh(client, "alice", token))
    assert app.extensions["token_store"].tokens_of("alice") == []


@EVERY_STORE
@pytest.mark.parametrize("change", ["replace", "remove"])
def test_a_login_checked_before_a_change_and_recorded_after_its_revocation_keeps_no_token(
    directory_app, users_file, change, monkeypatch
):
    """`flask users` runs between the login's password check and the recording of its
    refresh token, in the same second: the login is refused and its token taken back."""
    app = directory_app()
    client, runner = app.test_client(), app.test_cli_runner()
    assert log_in(client).status_code == 200  # the directory has read the file
    store = app.extensions["token_store"]
    issue = store.issue

    def issue_after_the_change(token: str, username: str, client: Any = None) -> int | None:
        args = ["add", "--replace", "alice"] if change == "replace" else ["remove", "alice"]
        result = runner.invoke(args=["users", *args], input="new password\n")
        assert result.exit_code == 0, result.output
        return issue(token, username, client)

    monkeypatch.setattr(store, "issue", issue_after_the_change)
    assert_unauthorized(log_in(client))
    assert store.tokens_of("alice") == []


def test_a_login_that_upgrades_its_hash_keeps_its_token(directory_app, users_file):
    write_users(users_file, OLD_HASHER, alice=PASSWORD)
    app = directory_app()
    response = log_in(app.test_client())
    assert response.status_code == 200
    assert len(app.extensions["token_store"].tokens_of("alice")) == 1


@pytest.mark.parametrize("args", [["add", "--replace", "alice"], ["remove", "alice"]])
def test_a_change_with_the_store_down_says_the_tokens_were_not_revoked(
    directory_app, users_file, args, monkeypatch
):
    from app.backends.interface import BackendUnavailable

    app = directory_app()
    store = app.extensions["token_store"]

    def unavailable(username: str, at: int) -> int:
        raise BackendUnavailable("connection refused")

    monkeypatch.setattr(store, "log_out_everywhere", unavailable)
    result = app.test_cli_runner().invoke(args=["users", *args], input="new password\n")
    assert result.exit_code == 1
    done = "new password for 'alice'" if args[0] == "add" else "removed 'alice'"
    assert result.stderr == (
        f"Error: {done}, but its refresh tokens were not revoked, the token store is"
        " unavailable: connection refused; run `flask sessions end alice` once it"
        " answers\n"  # a logout everywhere: its access tokens too, not only its refresh tokens
    )
    assert "Traceback" not in result.output


# --- the document ---------------------------------------------------------------------


def test_the_document_lists_the_401_and_the_password_with_a_directory(directory_app, make_app):
    client = directory_app().test_client()
    document = document_of(client)
    login = document["paths"]["/login"]["post"]
    assert "401" in login["responses"]
    assert document["components"]["schemas"]["LoginRequest"]["required"] == [
        "username",
        "password",
    ]
    assert_documented(document, "post", "/login", log_in(client, password="wrong!"))
    assert_documented(document, "post", "/login", log_in(client))
    open_document = document_of(make_app().test_client())
    assert "401" not in open_document["paths"]["/login"]["post"]["responses"]
    assert open_document["components"]["schemas"]["LoginRequest"]["required"] == ["username"]
