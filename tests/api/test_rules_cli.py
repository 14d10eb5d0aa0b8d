"""``flask rules check``: the rule that judges a request and the verdict, by role or token."""

from __future__ import annotations

import pytest

from tests.helpers.tokens import login

pytestmark = pytest.mark.store("sqlite")

RULES = """
[[rules]]
paths = ["/public/"]
allow = "public"

[[rules]]
hosts = ["app.example.com"]
paths = ["/admin/"]
allow = "admin"

[[rules]]
paths = ["/app/"]
allow = "user"

[[rules]]
hosts = ["*.example.com"]
allow = "user"
"""


@pytest.fixture
def rules_app(make_app, tmp_path):
    path = tmp_path / "rules.toml"
    path.write_text(RULES)
    return make_app(ACCESS_RULES_FILE=str(path))


def run(app, *arguments):
    return app.test_cli_runner().invoke(args=["rules", "check", *arguments])


@pytest.mark.parametrize(
    ("arguments", "rule", "verdict"),
    [
        (
            ["GET", "https://app.example.com/x/..;/admin/panel", "--role", "user"],
            'rules[2]: hosts = ["app.example.com"], paths = ["/admin/"], allow = "admin"',
            "verdict: 403 (admin only; the caller is user)",
        ),
        (
            ["GET", "https://APP.example.com:443/admin/", "--role", "admin"],
            "rules[2]:",
            "verdict: 200 (admin; the caller is admin)",
        ),
        (
            ["post", "https://app.example.com/app/items?x=1", "--role", "user"],
            "rules[3]: paths",
            "verdict: 200 (user",
        ),
        (["GET", "https://app.example.com/app/"], "rules[3]:", "verdict: 401 (user; no valid"),
        (["GET", "http://a.example/public/x"], "rules[1]:", "verdict: 200 (public)"),
        (["GET", "http://a.example.org/x", "--role", "admin"], "no rule matches", "verdict: 403"),
        (["GET", "http://b.example.com/x", "--role", "user"], "rules[4]:", "verdict: 200 (user"),
        (
            ["GET", "/admin/x", "--role", "admin"],
            'rules[2]: hosts = ["app.example.com"], paths = ["/admin/"], allow = "admin"'
            " (needs the host, which the request does not name: denied)",
            "verdict: 403 (denied)",
        ),
        (  # a URL as a client sends it: no fragment, / for an empty path, the query kept
            ["GET", "https://b.example.com?x=1#/admin/", "--role", "user"],
            "rules[4]:",
            "verdict: 200 (user",
        ),
        (
            ["GET", "https://app.example.com/admin#x", "--role", "user"],
            "rules[2]:",
            "verdict: 403 (admin only",
        ),
        (  # a path that begins with //, as a proxy names it: no host, /admin/x a reading
            ["GET", "//app.example.com/admin/x", "--role", "user"],
            "rules[2]:",
            "verdict: 403 (denied)",
        ),
    ],
)
def test_check_prints_the_rule_and_the_verdict(rules_app, arguments, rule, verdict):
    result = run(rules_app, *arguments)
    assert result.exit_code == 0, result.output
    first, second = result.output.splitlines()
    assert first.startswith(rule)
    assert second.startswith(verdict)


@pytest.mark.parametrize("method", ["HEAD", "head", "GET", "get", "POST", "PROPFIND"])
@pytest.mark.parametrize("role", ["user", "admin"])
def test_check_judges_any_method_as_the_gateway_does(make_app, tmp_path, method, role):
    path = tmp_path / "rules.toml"
    path.write_text(
        '[[rules]]\nmethods = ["GET"]\npaths = ["/admin/"]\nallow = "admin"\n'
        '[[rules]]\nallow = "user"\n'
    )
    app = make_app(ACCESS_RULES_FILE=str(path), TRUSTED_PROXIES="127.0.0.1/32", OPEN_LOGIN="true")
    client = app.test_client()
    token = login(client, "admin" if role == "admin" else "alice")["accessToken"]
    gateway = client.get(
        "/auth/check",
        headers={
            "Authorization": f"Bearer {token}",
            "X-Original-Method": method,
            "X-Original-URI": "/admin/panel",
        },
    )
    verdict = run(app, method, "/admin/panel", "--role", role).output.splitlines()[1]
    assert verdict.startswith(f"verdict: {gateway.status_code} ")


def test_check_verifies_a_token_as_the_check_does(rules_app):
    token = login(rules_app.test_client(), "admin")["accessToken"]
    result = run(rules_app, "GET", "https://app.example.com/admin/x", "--token", token)
    assert result.output.splitlines() == [
        "token: admin, admin",
        'rules[2]: hosts = ["app.example.com"], paths = ["/admin/"], allow = "admin"',
        "verdict: 200 (admin; the caller is admin)",
    ]
    result = run(rules_app, "GET", "https://app.example.com/admin/x", "--token", "x.y.z")
    assert result.output.splitlines()[0].startswith("token: refused (")
    assert result.output.splitlines()[-1] == "verdict: 401 (admin; no valid token)"


def test_check_needs_the_rules_file_and_one_caller(make_app, rules_app):
    result = run(make_app(), "GET", "/x", "--role", "user")
    assert result.exit_code == 1
    assert "ACCESS_RULES_FILE is not set" in result.output
    result = run(rules_app, "GET", "/x", "--role", "user", "--token", "x")
    assert result.exit_code == 1
    assert "not both" in result.output
