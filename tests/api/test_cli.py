"""``flask tokens ...``: the operator commands (on SQLite; tests/api/test_stores.py runs
them on the other stores)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from app.backends.interface import token_digest
from tests.helpers.tokens import login
from tests.helpers.tools import ROOT

LISTED_LINE = re.compile(r"([0-9a-f]{12})  (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")


@pytest.fixture
def store_url(app) -> str:
    """Return the URL of the store under test."""
    return app.config["SETTINGS"].token_store_url


def refreshes(client, username: str, refresh_token: str) -> bool:
    fields = {"username": username, "refreshToken": refresh_token}
    return client.post("/token", json=fields).status_code == 200


def test_count_counts_every_stored_token(runner, client):
    assert runner.invoke(args=["tokens", "count"]).stdout == "0\n"
    for username in ["alice", "alice", "bob"]:
        login(client, username)
    result = runner.invoke(args=["tokens", "count"])
    assert result.exit_code == 0
    assert result.stdout == "3\n"


def test_list_shows_digest_prefixes_and_issue_times_never_tokens(runner, client):
    before = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1))
    issued = [login(client, "alice")["refreshToken"] for _ in range(3)]
    login(client, "bob")
    result = runner.invoke(args=["tokens", "list", "alice"])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert len(lines) == 3
    matches = [LISTED_LINE.fullmatch(line) for line in lines]
    assert all(matches), lines
    assert {match.group(1) for match in matches} == {token_digest(t)[:12] for t in issued}
    assert all(match.group(2) >= before for match in matches)
    for token in issued:
        assert token not in result.output


def test_list_of_a_user_without_tokens_says_so(runner, client):
    login(client, "alice")
    result = runner.invoke(args=["tokens", "list", "nobody"])
    assert result.exit_code == 0
    assert result.stdout == ""
    assert "no refresh tokens for 'nobody'" in result.stderr


def test_revoke_user_revokes_every_token_of_that_user_only(runner, client):
    alice = [login(client, "alice:admin")["refreshToken"] for _ in range(2)]
    bob = login(client, "alice")["refreshToken"]
    result = runner.invoke(args=["tokens", "revoke-user", "alice:admin"])
    assert result.exit_code == 0
    assert result.stdout == "revoked 2 refresh tokens of 'alice:admin'\n"
    assert not any(refreshes(client, "alice:admin", token) for token in alice)
    assert refreshes(client, "alice", bob)
    again = runner.invoke(args=["tokens", "revoke-user", "alice:admin"])
    assert again.stdout == "revoked 0 refresh tokens of 'alice:admin'\n"


def test_revoke_by_listed_prefix_revokes_that_token(runner, client):
    first, second = login(client, "alice")["refreshToken"], login(client, "alice")["refreshToken"]
    prefix = token_digest(first)[:12]
    assert prefix in runner.invoke(args=["tokens", "list", "alice"]).stdout
    result = runner.invoke(args=["tokens", "revoke", prefix.upper()])
    assert result.exit_code == 0
    assert result.stdout == f"revoked the refresh token {prefix}\n"
    assert not refreshes(client, "alice", first)
    assert refreshes(client, "alice", second)


def test_revoke_of_an_unknown_prefix_fails_and_changes_nothing(runner, client):
    token = login(client, "alice")["refreshToken"]
    unknown = "0123abcd" if not token_digest(token).startswith("0123abcd") else "fedc9876"
    result = runner.invoke(args=["tokens", "revoke", unknown])
    assert result.exit_code == 1
    assert "no single refresh token has a digest starting with" in result.stderr
    assert refreshes(client, "alice", token)


@pytest.mark.parametrize("prefix", ["abc", "abcdefg", "a" * 65, "' OR 1=1", ""])
def test_revoke_needs_eight_to_64_hex_digits(runner, client, prefix):
    token = login(client, "alice")["refreshToken"]
    result = runner.invoke(args=["tokens", "revoke", prefix])
    assert result.exit_code == 2
    assert "hex digits" in result.stderr
    assert refreshes(client, "alice", token)


def test_revoke_token_reads_the_token_from_stdin_and_never_echoes_it(runner, client):
    token = login(client, "alice")["refreshToken"]
    result = runner.invoke(args=["tokens", "revoke-token"], input=token + "\n")
    assert result.exit_code == 0
    assert result.stdout == f"revoked the refresh token {token_digest(token)[:12]}\n"
    assert token not in result.output
    assert not refreshes(client, "alice", token)
    again = runner.invoke(args=["tokens", "revoke-token"], input=token)
    assert again.exit_code == 0
    assert "was not known" in again.stdout


def test_revoke_token_without_a_token_is_a_usage_error(runner):
    result = runner.invoke(args=["tokens", "revoke-token"], input="\n")
    assert result.exit_code == 2
    assert "give the refresh token on standard input" in result.stderr


def test_revoke_token_refuses_an_access_token_in_one_line_and_never_shows_it(runner, client):
    answer = login(client, "alice")
    result = runner.invoke(args=["tokens", "revoke-token"], input=answer["accessToken"] + "\n")
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: that is not a refresh token (42 letters and digits")
    assert result.stderr.count("\n") == 1
    assert answer["accessToken"] not in result.output
    assert refreshes(client, "alice", answer["refreshToken"])


@pytest.mark.parametrize(
    "malformed",
    ["x" * 41, "x" * 43, "x" * 41 + "-", "x" * 41 + "\u00e9", "a.b.c", "x" * 20 + " " + "x" * 21],
)
def test_revoke_token_refuses_what_is_not_shaped_as_a_refresh_token(runner, client, malformed):
    result = runner.invoke(args=["tokens", "revoke-token"], input=malformed + "\n")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith("Error: that is not a refresh token")
    assert malformed not in result.output


def test_revoke_token_of_a_well_formed_unknown_token_says_it_was_not_known(runner):
    result = runner.invoke(args=["tokens", "revoke-token"], input="A1" * 21 + "\n")
    assert result.exit_code == 0
    shown = token_digest("A1" * 21)[:12]
    assert result.stdout == f"the refresh token {shown} was not known (revoked already?)\n"


@pytest.mark.parametrize("second", ["\n", "another\n", "another"])
def test_revoke_token_refuses_more_than_one_line_and_revokes_nothing(runner, client, second):
    token = login(client, "alice")["refreshToken"]
    other = login(client, "bob")["refreshToken"]
    result = runner.invoke(args=["tokens", "revoke-token"], input=f"{token}\n{second}")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        "Error: give the refresh token as one line on standard input; it has more than one\n"
    )
    assert refreshes(client, "alice", token)
    assert refreshes(client, "bob", other)


@pytest.fixture
def unreachable_app(make_app, tmp_path):
    url = f"sqlite:///{tmp_path}/directory.sqlite3"
    app = make_app(TOKEN_STORE_URL=url, TOKEN_STORE_TIMEOUT="0.5")
    (tmp_path / "directory.sqlite3").mkdir()  # after start-up, which refuses a folder
    return app


@pytest.mark.parametrize(
    ("args", "stdin"),
    [
        (["count"], None),
        (["list", "alice"], None),
        (["revoke-user", "alice"], None),
        (["revoke", "abcdef0123"], None),
        (["revoke-token"], "x" * 42),
    ],
)
def test_commands_fail_clearly_when_the_store_is_unavailable(unreachable_app, args, stdin):
    result = unreachable_app.test_cli_runner().invoke(args=["tokens", *args], input=stdin)
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: the token store is unavailable: ")
    assert "Traceback" not in result.output


@pytest.mark.processes
def test_flask_tokens_runs_from_the_shell(app, client, instance_path, signing_secret, store_url):
    env = {
        "PATH": os.environ["PATH"],
        "FLASK_APP": "wsgi",
        "INSTANCE_PATH": str(instance_path),
        "SIGNING_SECRET": signing_secret,
        "TOKEN_STORE_URL": store_url,
    }

    def flask(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "flask", "tokens", *args],
            cwd=ROOT, env=env, input=stdin, capture_output=True, text=True, timeout=30,
        )  # fmt: skip

    token = login(client, "alice")["refreshToken"]
    assert flask("count").stdout == "1\n"
    result = flask("revoke-token", stdin=token + "\n")  # a pipe, as in `... | flask tokens ...`
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"revoked the refresh token {token_digest(token)[:12]}\n"
    assert flask("count").stdout == "0\n"
