"""The gateway with ACCESS_RULES_FILE: each proxy's way of naming the original request
(nginx, Traefik and Caddy headers, Envoy's ext_authz prefix), trust, the verdicts and
their answers, the path tricks through each, and the verdict cache."""

from __future__ import annotations

import io
import json
import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.views.gateway import MAX_LOGGED_QUERY
from tests.helpers.openapi import assert_documented, document_of
from tests.helpers.paths import OVERRIDE_HEADERS, SEGMENT, method_named, rewritten
from tests.helpers.tokens import bearer, login

pytestmark = pytest.mark.store("sqlite")

RULES = """
[[rules]]
paths = ["/public/"]
allow = "public"

[[rules]]
paths = ["/admin/"]
allow = "admin"

[[rules]]
paths = ["/closed/"]
allow = "deny"

[[rules]]
hosts = ["*.example.com"]
methods = ["DELETE"]
allow = "admin"

[[rules]]
paths = ["/app/"]
allow = "user"
"""
#: The three paths a review saw reach an admin upstream with a user token.
REVIEWED = ["/ADMIN/panel", "/x/..;/admin/panel", "/admin;/panel"]
TRICKS = [
    *REVIEWED,
    "/app/../admin/panel",
    "/app/%2e%2e/admin/panel",
    "/app/..%2fadmin/panel",
    "/app/..%5cadmin/panel",
    "/app\\..\\admin\\panel",
    "//admin//panel",
    "/app/%252e%252e/admin/panel",
    "/%61dmin/panel",
    "/adm%C4%B1n/panel",
    "/ADM%C4%B0N/panel",
    "/admin./panel",
    "/admin%20/panel",
    "/admin.%2e/panel",
    "//host/admin/panel",
    "/%2fapp/admin/panel",
    "/app/%u002e%u002e/admin/panel",
    "/app/%C0%AE%C0%AE/admin/panel",
]


@pytest.fixture
def rules_file(tmp_path):
    path = tmp_path / "rules.toml"
    path.write_text(RULES)
    return path


@pytest.fixture
def make_rules_app(make_app, rules_file):
    def make(**overrides):
        settings = {
            "ACCESS_RULES_FILE": str(rules_file),
            "TRUSTED_PROXIES": "127.0.0.1/32",
            "OPEN_LOGIN": "true",
        }
        return make_app(**{**settings, **overrides})

    return make


@pytest.fixture
def gate(make_rules_app):
    return make_rules_app().test_client()


@pytest.fixture
def tokens(gate):
    return {"user": login(gate)["accessToken"], "admin": login(gate, "admin")["accessToken"]}


def nginx(client, method, uri, token=None, host="app.example.com", **extra):
    """Ask as the shipped nginx snippet does: a GET naming the original method and URI."""
    headers = {"X-Original-Method": method, "X-Original-URI": uri, "Host": host, **extra}
    if token:
        headers.update(bearer(token))
    return client.get("/auth/check", headers=headers)


def forward_auth(client, method, uri, token=None, host="app.example.com", **extra):
    """Ask as Traefik's ForwardAuth and Caddy's forward_auth do (X-Forwarded-*)."""
    headers = {
        "X-Forwarded-Method": method,
        "X-Forwarded-Proto": "https",
        "X-Forwarded-Host": host,
        "X-Forwarded-Uri": uri,
        "X-Forwarded-For": "203.0.113.9",
        **extra,
    }
    if token:
        headers.update(bearer(token))
    return client.get("/auth/check", headers=headers)


def envoy(client, method, uri, token=None, host="app.example.com", **extra):
    """Ask as Envoy's ext_authz HTTP service does: the original method, the prefix and path."""
    headers = {"Host": host, **extra}
    if token:
        headers.update(bearer(token))
    return client.open("/auth/ext-authz" + uri, method=method, headers=headers)


PROTOCOLS = pytest.mark.parametrize("ask", [nginx, forward_auth, envoy])


@PROTOCOLS
def test_each_verdict_through_each_protocol(gate, tokens, ask):
    assert ask(gate, "GET", "/app/items", tokens["user"]).status_code == 200
    assert ask(gate, "GET", "/admin/panel", tokens["user"]).status_code == 403
    assert ask(gate, "GET", "/admin/panel", tokens["admin"]).status_code == 200
    assert ask(gate, "GET", "/closed/x", tokens["admin"]).status_code == 403
    assert ask(gate, "GET", "/elsewhere", tokens["admin"]).status_code == 403  # no rule
    assert ask(gate, "DELETE", "/app/items", tokens["user"]).status_code == 403
    assert ask(gate, "DELETE", "/app/items", tokens["admin"]).status_code == 200
    assert ask(gate, "DELETE", "/app/x", tokens["user"], host="APP.example.org").status_code == 200


@PROTOCOLS
def test_a_pass_names_the_caller_and_a_public_pass_needs_no_token(gate, tokens, ask):
    response = ask(gate, "GET", "/admin/panel", tokens["admin"])
    assert response.headers["X-Auth-Request-User"] == "admin"
    assert response.headers["X-Auth-Request-Groups"] == "admin"
    assert response.data == b""
    public = ask(gate, "POST", "/public/logo.png")
    assert public.status_code == 200
    assert public.data == b""
    assert "X-Auth-Request-User" not in public.headers
    assert public.headers["Cache-Control"] == "no-store"


@PROTOCOLS
def test_the_refusals_keep_the_protected_routes_answers(gate, tokens, ask):
    missing = ask(gate, "GET", "/app/items")
    assert missing.status_code == 401
    assert missing.data == b"Unauthorized"
    assert missing.headers["WWW-Authenticate"] == "Bearer"
    assert ask(gate, "GET", "/app/items", "x.y.z").status_code == 401
    forbidden = ask(gate, "GET", "/admin/panel", tokens["user"])
    assert forbidden.get_json() == {"message": "No access"}
    assert forbidden.headers["Cache-Control"] == "no-store"


@PROTOCOLS
@pytest.mark.parametrize("uri", TRICKS)
def test_no_spelling_of_the_admin_path_passes_a_user(gate, tokens, ask, uri):
    assert ask(gate, "GET", uri, tokens["user"]).status_code == 403


@pytest.mark.parametrize("uri", REVIEWED)
def test_the_reviewed_paths_pass_an_admin_where_every_reading_has_a_rule(
    make_rules_app, rules_file, tokens, uri
):
    # read as sent, each matches no rule (denied); with a last rule for any user, each
    # reading has one, and the strictest is the admin rule
    rules_file.write_text(RULES + '[[rules]]\nallow = "user"\n')
    gate = make_rules_app().test_client()
    assert nginx(gate, "GET", uri, tokens["admin"]).status_code == 200
    assert nginx(gate, "GET", uri, tokens["user"]).status_code == 403


def test_a_client_header_of_another_proxys_name_makes_the_verdict_only_stricter(gate, tokens):
    # nginx passes the client's own headers on: a forged X-Forwarded-Uri beside nginx's
    # X-Original-URI, or the reverse through Caddy, is judged too, and the strictest stands
    forged = {"X-Forwarded-Uri": "/app/x", "X-Forwarded-Method": "GET"}
    assert nginx(gate, "GET", "/admin/panel", tokens["user"], **forged).status_code == 403
    forged = {"X-Original-URI": "/public/x"}
    assert forward_auth(gate, "GET", "/admin/panel", tokens["user"], **forged).status_code == 403
    assert (
        nginx(gate, "GET", "/app/x", tokens["user"], **{"X-Forwarded-Uri": "/admin/"}).status_code
        == 403
    )


@pytest.mark.parametrize(
    "uri", ["/admin/x,/app/y", "/app/y, /admin/x", "/app/y,/admin/x", "/app/a,b/../../admin/"]
)
def test_a_uri_with_a_comma_is_judged_whole_and_by_each_piece_that_is_a_path(gate, tokens, uri):
    # a header a client sent and the proxy's own arrive joined by a comma: no piece escapes
    assert nginx(gate, "GET", uri, tokens["user"]).status_code == 403
    assert forward_auth(gate, "GET", uri, tokens["user"]).status_code == 403


def test_a_path_with_a_comma_of_its_own_passes(gate, tokens):
    assert nginx(gate, "GET", "/app/a,b", tokens["user"]).status_code == 200


def test_methods_sent_twice_are_each_judged(gate, tokens):
    assert nginx(gate, "GET, DELETE", "/app/items", tokens["user"]).status_code == 403


def test_a_head_is_judged_as_the_get_it_is_answered_as_too(make_rules_app, rules_file, tokens):
    rules_file.write_text(
        '[[rules]]\nmethods = ["GET"]\nallow = "admin"\n[[rules]]\nallow = "user"\n'
    )
    gate = make_rules_app().test_client()
    for ask in (nginx, forward_auth, envoy):
        assert ask(gate, "HEAD", "/x", tokens["user"]).status_code == 403
        assert ask(gate, "HEAD", "/x", tokens["admin"]).status_code == 200
        assert ask(gate, "POST", "/x", tokens["user"]).status_code == 200


def test_a_denial_by_a_rule_is_logged_with_its_reason(gate, tokens, capfd):
    capfd.readouterr()
    assert nginx(gate, "GET", "/closed/x", tokens["admin"]).status_code == 403
    lines = [json.loads(line) for line in capfd.readouterr().out.splitlines() if line[:1] == "{"]
    assert [line["reason"] for line in lines if line.get("path") == "/auth/check"] == [
        "denied_by_rule"
    ]


@PROTOCOLS
@pytest.mark.parametrize("header", OVERRIDE_HEADERS)
def test_a_method_override_header_is_judged_too(gate, tokens, ask, header):
    # many frameworks take X-HTTP-Method-Override and its kin for the request's method
    for value in ("DELETE", "delete", "PATCH, DELETE"):
        assert ask(gate, "POST", "/app/x", tokens["user"], **{header: value}).status_code == 403
    assert ask(gate, "POST", "/app/x", tokens["admin"], **{header: "DELETE"}).status_code == 200
    assert ask(gate, "POST", "/app/x", tokens["user"], **{header: "PUT"}).status_code == 200


@PROTOCOLS
@pytest.mark.parametrize("query", ["?_method=DELETE", "?a=1&_method=delete", "?%5Fmethod=DELETE"])
def test_a_method_parameter_of_the_query_is_judged_too(gate, tokens, ask, query):
    assert ask(gate, "POST", "/app/x" + query, tokens["user"]).status_code == 403
    assert ask(gate, "POST", "/app/x" + query, tokens["admin"]).status_code == 200
    assert ask(gate, "POST", "/app/x?_method=PUT", tokens["user"]).status_code == 200


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_spelling_of_a_method_passes_a_user_where_its_rule_wants_an_admin(gate, tokens, data):
    method, headers, query = data.draw(method_named("DELETE"))
    ask = data.draw(st.sampled_from([nginx, forward_auth, envoy]))
    if ask is envoy:  # Envoy's check is a request of the method itself
        method = method.upper()
    response = ask(gate, method, "/app/x" + query, tokens["user"], **headers)
    assert response.status_code == 403, (method, headers, query)


@pytest.mark.parametrize("method", ["", " ", ",", " , "])
def test_an_empty_method_header_names_no_method(gate, tokens, method, caplog):
    # a rule that needs the method is a loud 400, never skipped as if no method matched
    with caplog.at_level(logging.WARNING):
        assert nginx(gate, method, "/app/x", tokens["admin"]).status_code == 400
        assert forward_auth(gate, method, "/app/x", tokens["admin"]).status_code == 400
    assert "names no original method, which rules[4] needs" in caplog.text
    forged = {"X-HTTP-Method-Override": "GET"}  # an override never stands in for it
    assert nginx(gate, "", "/app/x", tokens["admin"], **forged).status_code == 400


@pytest.mark.parametrize(
    "host",
    [
        "a.example.com:80:81",
        "a.example.com@evil",
        "a.example.com;x",
        "a.example.com:x",
        "a.example.com, b.example.com",
    ],
)
def test_a_host_that_is_no_plain_name_is_denied_beside_rules_that_name_hosts(gate, tokens, host):
    assert nginx(gate, "GET", "/app/x", tokens["admin"], host=host).status_code == 403
    assert nginx(gate, "GET", "/app/x", tokens["admin"], host="a.example.com:80").status_code == 200


@pytest.mark.parametrize("uri", ["/adm\xc4\xb1n/panel", "/adm%C4%B1n/panel", "/%E2%84%AAadmin/x"])
def test_a_unicode_case_fold_is_judged_as_the_ascii_it_folds_to(
    make_rules_app, rules_file, tokens, uri
):
    # read as sent, each path has the last rule's verdict; a case-insensitive matcher
    # reads the dotless i as i, and the Kelvin sign as k (the raw bytes come as Latin-1)
    rules_file.write_text(
        RULES.replace('"/admin/"', '"/admin/", "/kadmin/"') + '[[rules]]\nallow = "user"\n'
    )
    gate = make_rules_app().test_client()
    assert nginx(gate, "GET", uri, tokens["user"]).status_code == 403
    assert nginx(gate, "GET", uri, tokens["admin"]).status_code == 200


@pytest.mark.parametrize("uri", ["/public/\xc0\xae\xc0\xae/admin/x", "/public/\xff", "/public/#/x"])
def test_a_uri_that_is_no_utf8_or_holds_a_raw_fragment_is_denied(gate, tokens, uri):
    assert nginx(gate, "GET", uri, tokens["admin"]).status_code == 403


def test_a_lower_case_method_is_judged_as_the_upper_case_one_too(gate, tokens):
    assert nginx(gate, "delete", "/app/items", tokens["user"]).status_code == 403


def test_the_original_request_is_believed_from_a_trusted_proxy_only(make_rules_app, tokens):
    untrusted = make_rules_app(TRUSTED_PROXIES="192.0.2.1/32").test_client()
    for ask in (nginx, forward_auth, envoy):
        # every rule names a path, a host or a method: none is believed, so each denies
        assert ask(untrusted, "GET", "/public/x").status_code == 403
        assert ask(untrusted, "GET", "/app/x", tokens["admin"]).status_code == 403


def test_a_rule_that_needs_nothing_of_the_request_decides_for_any_peer(
    make_rules_app, rules_file, tokens
):
    rules_file.write_text('[[rules]]\nallow = "admin"\n')
    untrusted = make_rules_app(TRUSTED_PROXIES="192.0.2.1/32").test_client()
    assert nginx(untrusted, "GET", "/x", tokens["admin"]).status_code == 200
    assert nginx(untrusted, "GET", "/x", tokens["user"]).status_code == 403


def test_a_trusted_proxy_that_names_no_uri_is_a_loud_400(gate, tokens, caplog):
    with caplog.at_level(logging.WARNING):
        response = gate.get(
            "/auth/check", headers={**bearer(tokens["user"]), "X-Original-Method": "GET"}
        )
    assert response.status_code == 400
    assert response.headers["Cache-Control"] == "no-store"
    assert "names no original path, which rules[1] needs" in caplog.text


@pytest.mark.parametrize("query", ["role=admin", "role=user", "x=1", "&"])
def test_a_query_beside_the_rules_file_is_a_400(gate, tokens, query, caplog):
    with caplog.at_level(logging.WARNING):
        response = gate.get(
            f"/auth/check?{query}",
            headers={
                **bearer(tokens["admin"]),
                "X-Original-URI": "/app/",
                "X-Original-Method": "GET",
            },
        )
    assert response.status_code == 400
    assert response.get_json() == {
        "message": "with ACCESS_RULES_FILE the check takes no query: the rules decide"
    }
    assert "beside ACCESS_RULES_FILE" in caplog.text


def test_the_warning_of_a_query_is_redacted_before_it_is_cut(gate, tokens, caplog):
    token = "Ab3" * 14  # shaped like a refresh token, across the cut of the quote
    query = "x=" + "y" * (MAX_LOGGED_QUERY - 2 - 3 - 41) + "&t=" + token
    with caplog.at_level(logging.WARNING):
        gate.get(f"/auth/check?{query}", headers=bearer(tokens["admin"]))
    assert "beside ACCESS_RULES_FILE" in caplog.text
    assert "Ab3Ab3Ab3" not in caplog.text


@pytest.mark.parametrize("method", ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_envoy_asks_with_any_method_and_its_body_is_never_read(gate, tokens, method):
    class Unreadable(io.RawIOBase):
        def read(self, *args):
            raise AssertionError("the body was read")

        readinto = read

    response = gate.open(
        "/auth/ext-authz/app/items",
        method=method,
        headers={**bearer(tokens["user"]), "Content-Length": "5"},
        environ_overrides={"wsgi.input": Unreadable()},
    )
    assert response.status_code == 200
    assert response.headers["X-Auth-Request-User"] == "alice"


@pytest.mark.parametrize("method", ["PROPFIND", "MKCOL", "TRACE", "CONNECT", "PURGE", "X-CUSTOM"])
@pytest.mark.parametrize("path", ["/app/items", ""])
def test_envoy_asks_with_any_method_token_and_is_never_a_405(gate, tokens, method, path):
    expected = 200 if path else 403  # "/": no rule
    for token in (tokens["user"], tokens["admin"]):
        response = envoy(gate, method, path, token)
        assert response.status_code == expected
    assert envoy(gate, method, path).status_code == (401 if path else 403)


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(method=st.from_regex(r"[A-Za-z!#$%&'*+.^_`|~0-9-]{1,20}", fullmatch=True))
def test_envoy_judges_any_method_token_by_the_rules(gate, tokens, method):
    # rules[4]: a DELETE on a host of example.com is for admins, whatever else it asks
    expected = 403 if method.upper() == "DELETE" else 200
    assert envoy(gate, method, "/app/items", tokens["user"]).status_code == expected
    assert envoy(gate, method, "/app/items", tokens["admin"]).status_code == 200


def test_envoy_reads_the_path_after_the_prefix_with_its_query(gate, tokens):
    assert envoy(gate, "GET", "/app/items?next=/admin/", tokens["user"]).status_code == 200
    assert envoy(gate, "GET", "", tokens["user"]).status_code == 403  # "/": no rule
    assert gate.get("/auth/ext-authzadmin", headers=bearer(tokens["user"])).status_code == 404


def test_envoy_reads_the_path_of_a_prefix_spelled_otherwise_too(gate, tokens):
    # routed by the decoded path; the raw one then no longer starts with the prefix as written
    response = gate.get("/auth/ext%2Dauthz/admin/x", headers=bearer(tokens["user"]))
    assert response.status_code == 403
    response = gate.get("/auth/ext%2Dauthz/app/x", headers=bearer(tokens["user"]))
    assert response.status_code == 200


def test_envoy_is_judged_by_the_host_it_routes_by_never_x_forwarded_host(gate, tokens):
    # the rule for DELETE on *.example.com holds for the Host Envoy sends and routes by
    answer = envoy(gate, "DELETE", "/app/items", tokens["user"], X_Forwarded_Host="other.org")
    assert answer.status_code == 403
    answer = envoy(gate, "DELETE", "/app/items", tokens["user"], host="other.org")
    assert answer.status_code == 200


def test_without_a_rules_file_envoy_passes_any_authenticated_user(client):
    token = login(client)["accessToken"]
    assert client.post("/auth/ext-authz/admin/x", headers=bearer(token)).status_code == 200
    assert client.post("/auth/ext-authz/admin/x").status_code == 401


def test_without_a_rules_file_the_original_request_changes_nothing(client):
    token = login(client)["accessToken"]
    response = nginx(client, "GET", "/admin/panel", token)
    assert response.status_code == 200
    assert client.get("/auth/check?role=admin", headers=bearer(token)).status_code == 403


# --- the verdict cache ------------------------------------------------------------------


def test_a_kept_verdict_is_the_requests_own(make_rules_app):
    # a pass is kept per token by AUTH_CHECK_CACHE_SECONDS; with rules the proxy's key holds
    # the method, host and URI too (deploy/nginx/), and the check answers each on its own
    gate = make_rules_app(AUTH_CHECK_CACHE_SECONDS="5").test_client()
    user = login(gate)["accessToken"]
    passed = nginx(gate, "GET", "/app/items", user)
    assert passed.status_code == 200
    assert passed.headers["X-Accel-Expires"].startswith("@")
    refused = nginx(gate, "GET", "/admin/panel", user)
    assert refused.status_code == 403
    assert "X-Accel-Expires" not in refused.headers
    public = nginx(gate, "GET", "/public/x")
    assert public.headers["X-Accel-Expires"] == "0"  # nothing of a token to key it on


def test_a_changed_rules_file_is_judged_within_a_second(make_rules_app, rules_file, tokens):
    from tests.helpers.clock import ManualClock

    clock = ManualClock(1_900_000_000)
    gate = make_rules_app(clock=clock).test_client()
    token = login(gate, "admin")["accessToken"]
    assert nginx(gate, "GET", "/closed/x", token).status_code == 403
    rules_file.write_text('[[rules]]\npaths = ["/closed/"]\nallow = "admin"\n')
    clock.advance(1.5)
    assert nginx(gate, "GET", "/closed/x", token).status_code == 200


def test_every_answer_with_rules_is_the_documented_one(gate, tokens):
    document = document_of(gate)
    for ask, status, token, uri in [
        (nginx, 200, "admin", "/admin/panel"),
        (nginx, 200, None, "/public/x"),
        (nginx, 401, None, "/app/x"),
        (nginx, 403, "user", "/admin/panel"),
        (forward_auth, 200, "user", "/app/x"),
    ]:
        response = ask(gate, "GET", uri, tokens[token] if token else None)
        assert response.status_code == status
        assert_documented(document, "get", "/auth/check", response)
    response = gate.get("/auth/check?role=admin", headers=bearer(tokens["admin"]))
    assert_documented(document, "get", "/auth/check", response)
    for method, status, token, uri in [
        ("post", 200, "user", "/app/x"),
        ("delete", 403, "user", "/app/x"),
        ("get", 401, None, "/app/x"),
        ("put", 200, None, "/public/x"),
    ]:
        response = envoy(gate, method.upper(), uri, tokens[token] if token else None)
        assert response.status_code == status
        assert_documented(document, method, "/auth/ext-authz/{path}", response)
    response = envoy(gate, "PATCH", "/", tokens["admin"])
    assert response.status_code == 403  # no rule for /
    assert_documented(document, "patch", "/auth/ext-authz/", response)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_rewriting_of_an_admin_path_passes_a_user_through_any_protocol(gate, tokens, data):
    path = data.draw(rewritten("/admin/" + data.draw(SEGMENT), raw=False))
    ask = data.draw(st.sampled_from([nginx, forward_auth, envoy]))
    assert ask(gate, "GET", path, tokens["user"]).status_code == 403, path
