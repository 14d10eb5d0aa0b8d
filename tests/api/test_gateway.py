"""GET /auth/check, nginx's auth_request: its answers, the role rule, the identity headers."""

from __future__ import annotations

import io
import json
import logging
import time
from urllib.parse import unquote

import jwt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.auth import tokens
from app.auth.tokens import issue_cookie_token
from app.extensions import KEY_RING
from app.views.gateway import cookie_identity, header_text
from tests.helpers.clock import ManualClock
from tests.helpers.openapi import assert_documented, document_of
from tests.helpers.tokens import bearer, login, make_token, valid_claims

# The check reads no store for a Bearer token; the cookie's deny list is the store's own
# suite's to test on every backend.
pytestmark = pytest.mark.store("sqlite")

USER = {"source": "corp", "id": "248289761001", "shownName": "Jane Doe"}
#: What a header value may hold: percent-encoded UTF-8 and the characters kept as they are.
ENCODED = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~@%")
#: Queries that no nginx config of the shipped snippets sends: each a config mistake.
BAD_QUERIES = [
    "role=admn",
    "role=Admin",
    "role=ADMIN",
    "role=",
    "role",
    "role=admin&role=admin",
    "role=admin&role=user",
    "role=admin,user",
    "role=admin%00",
    "role=admin%0d%0aX-Injected:%201",
    "rol=admin",
    "roles=admin",
    "role=admin&x=1",
    "x=1",
    "&",
]


@pytest.fixture
def cookie_client(make_app):
    """A client of an app whose check accepts the cookie token too (AUTH_CHECK_COOKIE)."""
    return make_app(AUTH_CHECK_COOKIE="on").test_client()


def check(client, query: str = "", headers=None, **kwargs):
    return client.get(f"/auth/check{'?' if query else ''}{query}", headers=headers, **kwargs)


def cookie_token(client, user=None, lifetime: int = 60) -> str:
    ring = client.application.extensions[KEY_RING]
    return issue_cookie_token(USER if user is None else user, ring, lifetime)


def with_cookie(client, token: str):
    client.set_cookie("jwt", token)
    return client


# --- 401: as the protected endpoints answer it -------------------------------------


def assert_protected_401(client, response) -> None:
    reference = client.get("/user-accessible", headers={"Authorization": "Bearer x.y.z"})
    assert response.status_code == 401 == reference.status_code
    assert response.data == reference.data == b"Unauthorized"
    assert response.headers["Content-Type"] == reference.headers["Content-Type"] == "text/plain"
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert response.headers["Cache-Control"] == "no-store"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic YWxpY2U6cHc="},
        {"Authorization": "Bearer not.a.token"},
        {"Authorization": "Bearer a b"},
    ],
    ids=["none", "empty", "basic", "malformed", "two words"],
)
def test_a_missing_or_malformed_token_is_the_protected_routes_401(client, headers):
    assert_protected_401(client, check(client, headers=headers))
    assert_protected_401(client, check(client, "role=admin", headers=headers))


def test_a_wrongly_signed_token_is_401(client):
    assert_protected_401(
        client, check(client, headers=bearer(make_token("k" * 40, valid_claims())))
    )


def test_an_expired_token_is_401_from_the_second_its_exp_names(make_app):
    clock = ManualClock()
    client = make_app(clock=clock).test_client()
    token = login(client)["accessToken"]
    exp = tokens.verify_access_token(token, client.application.extensions[KEY_RING])["exp"]
    clock.advance(exp - 0.001 - clock())
    assert check(client, headers=bearer(token)).status_code == 200
    clock.advance(0.001)
    assert_protected_401(client, check(client, headers=bearer(token)))


def test_the_cookie_never_authenticates_while_the_setting_is_off(client):
    with_cookie(client, cookie_token(client))
    assert_protected_401(client, check(client))


# --- 200 and 403: the role rule of requires_roles ------------------------------------


@pytest.mark.parametrize(
    ("username", "query", "status"),
    [
        ("alice", "", 200),
        ("alice", "role=user", 200),
        ("alice", "role=admin", 403),
        ("admin", "", 200),
        ("admin", "role=user", 200),  # admin passes user
        ("admin", "role=admin", 200),
        ("admin", "role=%61dmin", 200),  # the same query, spelled otherwise
        ("alice", "role=%61dmin", 403),
    ],
)
def test_the_role_rule_is_requires_roles(client, username, query, status):
    response = check(client, query, headers=bearer(login(client, username)["accessToken"]))
    assert response.status_code == status
    if status == 403:
        reference = client.get("/admin-accessible", headers=bearer(login(client)["accessToken"]))
        assert response.data == reference.data == b'{"message":"No access"}\n'
        assert response.headers["Content-Type"] == reference.headers["Content-Type"]
        assert response.headers["Cache-Control"] == "no-store"


def test_a_pass_is_an_empty_200_with_the_caller_in_oauth2_proxys_headers(client):
    token = login(client, "admin")["accessToken"]
    claims = tokens.verify_access_token(token, client.application.extensions[KEY_RING])
    response = check(client, "role=admin", headers=bearer(token))
    assert (response.status_code, response.data) == (200, b"")
    assert "Content-Type" not in response.headers
    assert response.headers["Content-Length"] == "0"
    assert response.headers["X-Auth-Request-User"] == "admin"
    assert response.headers["X-Auth-Request-Groups"] == "admin"
    assert response.headers["X-Auth-Request-Expires"] == str(claims["exp"])
    assert response.headers["Cache-Control"] == "no-store"
    assert "X-Auth-Request-Source" not in response.headers  # a Bearer token's
    head = client.head("/auth/check", headers=bearer(token))
    assert head.status_code == 200
    assert head.headers["X-Auth-Request-User"] == "admin"


def test_a_non_ascii_username_is_percent_encoded(client):
    token = login(client, "Zoë O'Brien 🦊")["accessToken"]
    value = check(client, headers=bearer(token)).headers["X-Auth-Request-User"]
    assert value == "Zo%C3%AB%20O%27Brien%20%F0%9F%A6%8A"
    assert unquote(value) == "Zoë O'Brien 🦊"


def test_the_check_reads_no_body_and_no_store(client, monkeypatch):
    token = login(client)["accessToken"]

    class Unreadable(io.RawIOBase):
        def read(self, *args):
            raise AssertionError("the body was read")

        readinto = read

    def no_store():
        raise AssertionError("the store was reached")

    monkeypatch.setattr("app.http.guards.get_store", no_store)
    response = client.get(
        "/auth/check",
        headers={**bearer(token), "Content-Length": "5", "Content-Type": "application/json"},
        environ_overrides={"wsgi.input": Unreadable()},
    )
    assert response.status_code == 200


# --- 400: a mistake in the nginx config ---------------------------------------------


@pytest.mark.parametrize("query", BAD_QUERIES)
def test_any_other_query_is_a_400_and_a_warning_naming_it(client, caplog, query):
    admin = bearer(login(client, "admin")["accessToken"])
    for headers in [admin, {}]:  # loud for a valid token and for none alike
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            response = check(client, query, headers=headers)
        assert response.status_code == 400
        assert response.get_json() == {
            "message": "the check takes no query, role=user or role=admin"
        }
        assert response.headers["Cache-Control"] == "no-store"
        (record,) = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert repr(query) in record.getMessage()
        assert not {"\n", "\r"} & set(record.getMessage())


def test_the_warning_quotes_a_long_query_cut_short(client, caplog):
    with caplog.at_level(logging.WARNING):
        assert check(client, "role=" + "x" * 5000).status_code == 400
    (record,) = caplog.records
    assert len(record.getMessage()) < 500


# --- the request log and the metrics -------------------------------------------------


def request_lines(capfd) -> list[dict]:
    return [json.loads(line) for line in capfd.readouterr().out.splitlines() if line[:1] == "{"]


def test_each_answer_gets_a_request_log_line(client, capfd):
    user = bearer(login(client, "alice")["accessToken"])
    capfd.readouterr()
    check(client, headers=user)
    check(client, "role=admin", headers=user)
    check(client)
    check(client, "role=nobody", headers=user)
    lines = request_lines(capfd)
    assert [(line["path"], line["status"]) for line in lines] == [
        ("/auth/check", 200),
        ("/auth/check", 403),
        ("/auth/check", 401),
        ("/auth/check", 400),
    ]
    assert [line["user"] for line in lines] == ["alice", "alice", None, None]
    assert [line.get("reason") for line in lines] == [None, "wrong_role", "missing", None]
    assert all("role=" not in line["path"] for line in lines)  # the query is never logged


def test_the_metrics_count_the_check_under_its_route(client):
    from tests.helpers.metrics import requests_of, scrape, value

    user = bearer(login(client, "alice")["accessToken"])
    for query, headers in [("", user), ("", user), ("role=admin", user), ("", {})]:
        check(client, query, headers=headers)
    samples = scrape(client)
    assert requests_of(samples, "/auth/check", "GET", 200) == 2
    assert requests_of(samples, "/auth/check", "GET", 403) == 1
    assert requests_of(samples, "/auth/check", "GET", 401) == 1
    failures = "token_service_auth_failures_total"
    assert value(samples, failures, reason="wrong_role") == 1
    assert value(samples, failures, reason="missing") == 1


# --- the cookie token (AUTH_CHECK_COOKIE) -------------------------------------------


def test_a_cookie_token_passes_as_a_user_with_its_fields(cookie_client):
    token = cookie_token(cookie_client, lifetime=120)
    exp = jwt.decode(token, options={"verify_signature": False})["exp"]
    response = check(with_cookie(cookie_client, token))
    assert (response.status_code, response.data) == (200, b"")
    assert response.headers["X-Auth-Request-User"] == "corp:248289761001"
    assert response.headers["X-Auth-Request-Source"] == "corp"
    assert response.headers["X-Auth-Request-Name"] == "Jane%20Doe"
    assert response.headers["X-Auth-Request-Groups"] == "user"
    assert response.headers["X-Auth-Request-Expires"] == str(exp)
    assert check(cookie_client, "role=user").status_code == 200
    assert check(cookie_client, "role=admin").status_code == 403  # never an admin


def test_absent_cookie_fields_send_no_header(cookie_client):
    response = check(with_cookie(cookie_client, cookie_token(cookie_client, {"shownName": "x"})))
    assert response.status_code == 200
    assert "X-Auth-Request-User" not in response.headers
    assert "X-Auth-Request-Source" not in response.headers
    assert response.headers["X-Auth-Request-Name"] == "x"


@pytest.mark.parametrize(
    ("user", "identity"),
    [
        ({"source": "corp", "id": "admin"}, "corp:admin"),
        ({"id": "admin"}, ":admin"),  # no source: an empty one, still no bare "admin"
        ({"source": "", "id": "admin"}, ":admin"),
        ({"source": "a:b", "id": "c"}, "a%3Ab:c"),  # a ":" inside is encoded: one bare ":"
        ({"source": "a", "id": "b:c"}, "a:b%3Ac"),
        ({"source": "corp", "id": ""}, "corp:"),
    ],
)
def test_a_cookie_user_is_namespaced_by_its_source_and_never_a_local_one(
    client, cookie_client, user, identity
):
    response = check(with_cookie(cookie_client, cookie_token(cookie_client, user)))
    assert response.status_code == 200
    assert response.headers["X-Auth-Request-User"] == identity
    local_admin = check(client, headers=bearer(login(client, "admin")["accessToken"]))
    assert local_admin.headers["X-Auth-Request-User"] == "admin"
    local = check(client, headers=bearer(login(client, identity or "x")["accessToken"]))
    assert local.headers["X-Auth-Request-User"] != identity  # "corp:admin" is "corp%3Aadmin"


IDENTITY_PART = st.text(max_size=24)


@given(source=st.one_of(st.none(), IDENTITY_PART), identifier=IDENTITY_PART, name=st.text())
def test_a_cookie_identity_names_its_source_and_id_and_no_local_user(source, identifier, name):
    user = {"id": identifier} if source is None else {"source": source, "id": identifier}
    identity = cookie_identity(user)
    assert identity is not None
    assert set(identity) <= ENCODED | {":"}
    encoded_source, bare, encoded_id = identity.partition(":")
    assert bare == ":"
    assert_safe_and_faithful(source or "", encoded_source)
    assert_safe_and_faithful(identifier, encoded_id)
    assert header_text(name) != identity  # a local username's header never has a bare ":"


def test_a_float_exp_is_given_rounded_down(cookie_client, signing_key):
    exp = time.time() + 60.75
    token = make_token(signing_key, {"sub": USER, "exp": exp})
    response = check(with_cookie(cookie_client, token))
    assert response.headers["X-Auth-Request-Expires"] == str(int(exp))


def test_a_bearer_header_decides_even_beside_a_valid_cookie(cookie_client):
    with_cookie(cookie_client, cookie_token(cookie_client))
    assert_protected_401(cookie_client, check(cookie_client, headers=bearer("x.y.z")))
    token = login(cookie_client, "bob")["accessToken"]
    response = check(cookie_client, headers=bearer(token))
    assert response.headers["X-Auth-Request-User"] == "bob"
    assert "X-Auth-Request-Source" not in response.headers


def test_a_bad_expired_or_logged_out_cookie_token_is_401(cookie_client, signing_key):
    assert_protected_401(cookie_client, check(cookie_client))  # no cookie
    with_cookie(cookie_client, make_token("k" * 40, {"sub": USER, "exp": time.time() + 60}))
    assert_protected_401(cookie_client, check(cookie_client))
    token = cookie_token(cookie_client)
    with_cookie(cookie_client, token)
    assert check(cookie_client).status_code == 200
    with_cookie(cookie_client, make_token(signing_key, {"sub": USER, "exp": int(time.time()) - 1}))
    assert_protected_401(cookie_client, check(cookie_client))
    with_cookie(cookie_client, token)
    assert cookie_client.post("/auth/logout").status_code == 204
    with_cookie(cookie_client, token)  # the logout cleared it: the browser's copy, kept
    assert_protected_401(cookie_client, check(cookie_client))


def test_an_access_token_in_the_cookie_is_401(cookie_client):
    with_cookie(cookie_client, login(cookie_client)["accessToken"])
    assert_protected_401(cookie_client, check(cookie_client))


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 200),  # no browser: no other site's doing
        ({"Sec-Fetch-Site": "same-origin"}, 200),
        ({"Sec-Fetch-Site": "same-origin", "X-Original-Method": "POST"}, 200),
        ({"Sec-Fetch-Site": "none", "X-Original-Method": "GET"}, 200),
        ({"Sec-Fetch-Site": "same-site", "X-Original-Method": "GET"}, 200),
        ({"Sec-Fetch-Site": "same-site", "X-Original-Method": "POST"}, 401),
        # a method override makes a sibling site's navigation another method
        ({"Sec-Fetch-Site": "same-site", "X-Original-Method": "GET", "X-HTTP-Method": "PUT"}, 401),
        (
            {"Sec-Fetch-Site": "same-site", "X-Original-Method": "GET", "X-Method-Override": "GET"},
            200,
        ),
        (
            {
                "Sec-Fetch-Site": "same-site",
                "X-Original-Method": "GET",
                "X-Original-URI": "/x?_method=DELETE",
            },
            401,
        ),
        (
            {
                "Sec-Fetch-Site": "same-site",
                "X-Original-Method": "GET",
                "X-Original-URI": "/x?_method=head",
            },
            200,
        ),
        ({"Sec-Fetch-Site": "same-site"}, 401),  # no method named: not a navigation
        ({"Sec-Fetch-Site": "cross-site", "X-Original-Method": "GET"}, 401),
        ({"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, 401),
        ({"Origin": "http://localhost", "X-Original-Method": "POST"}, 200),  # its own origin
        ({"Origin": "https://evil.example", "X-Original-Method": "POST"}, 401),
        ({"Origin": "null", "X-Original-Method": "POST"}, 401),
    ],
)
def test_the_cookie_authenticates_requests_of_the_same_site_only(cookie_client, headers, status):
    response = check(with_cookie(cookie_client, cookie_token(cookie_client)), headers=headers)
    assert response.status_code == status
    if status == 401:
        assert_protected_401(cookie_client, response)


# --- header values: nothing a name holds can end a header ---------------------------


def assert_safe_and_faithful(value: str, encoded: str) -> None:
    assert set(encoded) <= ENCODED
    assert unquote(encoded, errors="surrogatepass") == value


@given(st.text())
def test_header_text_is_ascii_without_controls_and_decodes_back(value):
    assert_safe_and_faithful(value, header_text(value))


def test_header_text_keeps_a_lone_surrogate_as_its_three_bytes():
    assert header_text("a\ud800b") == "a%ED%A0%80b"
    assert_safe_and_faithful("a\ud800b", header_text("a\ud800b"))


@pytest.mark.parametrize(
    "name",
    [
        "Jane\r\nX-Auth-Request-Groups: admin",
        "Jane\nSet-Cookie: jwt=x",
        "\x00\x07\x1b[31m\x7f\x85\u2028\u2029\u202e",
        "Ærøskøbing 東京 🦊",
        "a\ud800b",
        "",
        "%41%0d%0a",
    ],
)
def test_a_shown_name_cannot_inject_a_header(cookie_client, name):
    user = {"source": "corp\r\nX-Evil: 1", "id": "7\n8", "shownName": name}
    response = check(with_cookie(cookie_client, cookie_token(cookie_client, user)))
    assert response.status_code == 200
    assert not {"X-Evil", "Set-Cookie"} & set(response.headers.keys())
    assert response.headers.getlist("X-Auth-Request-Groups") == ["user"]
    assert_safe_and_faithful(name, response.headers["X-Auth-Request-Name"])
    assert_safe_and_faithful(user["source"], response.headers["X-Auth-Request-Source"])
    source, _, identifier = response.headers["X-Auth-Request-User"].partition(":")
    assert_safe_and_faithful(user["source"], source)
    assert_safe_and_faithful(user["id"], identifier)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=st.text(max_size=64), identifier=st.text(max_size=32))
def test_any_shown_name_and_id_reach_the_headers_safely(cookie_client, name, identifier):
    user = {"source": "corp", "id": identifier, "shownName": name}
    response = check(with_cookie(cookie_client, cookie_token(cookie_client, user)))
    assert response.status_code == 200
    assert_safe_and_faithful(name, response.headers["X-Auth-Request-Name"])
    source, bare, encoded_id = response.headers["X-Auth-Request-User"].partition(":")
    assert (source, bare) == ("corp", ":")
    assert_safe_and_faithful(identifier, encoded_id)


# --- the API document ----------------------------------------------------------------


def test_every_answer_is_the_documented_one(client, cookie_client):
    user = bearer(login(client, "alice")["accessToken"])
    admin = bearer(login(client, "admin")["accessToken"])
    document = document_of(client)
    operation = document["paths"]["/auth/check"]["get"]
    assert operation["security"] == [{"bearerAuth": []}]
    assert "503" not in operation["responses"]
    for method, query, headers, status in [
        ("get", "", user, 200),
        ("head", "", user, 200),
        ("get", "role=admin", admin, 200),
        ("get", "role=admin", user, 403),
        ("get", "", {}, 401),
        ("get", "role=x", user, 400),
    ]:
        response = client.open(f"/auth/check?{query}", method=method, headers=headers)
        assert response.status_code == status
        assert_documented(document, method, "/auth/check", response)
    document = document_of(cookie_client)
    operation = document["paths"]["/auth/check"]["get"]
    assert operation["security"] == [{"bearerAuth": []}, {"cookieAuth": []}]
    response = check(with_cookie(cookie_client, cookie_token(cookie_client)))
    assert_documented(document, "get", "/auth/check", response)
    response = check(with_cookie(cookie_client, cookie_token(cookie_client, {"id": "x"})))
    assert_documented(document, "get", "/auth/check", response)


# --- the verdict cache (AUTH_CHECK_CACHE_SECONDS) ------------------------------------


@pytest.fixture
def caching_client(make_app):
    """A client of an app that lets nginx keep a verdict up to 5 seconds."""
    return make_app(AUTH_CHECK_CACHE_SECONDS="5", AUTH_CHECK_COOKIE="on").test_client()


def test_no_verdict_may_be_kept_unless_the_setting_says(client):
    response = check(client, headers=bearer(login(client)["accessToken"]))
    assert response.status_code == 200
    assert "X-Accel-Expires" not in response.headers


@pytest.mark.parametrize(
    ("lifetime_left", "kept_until"),
    [
        (60, 5),  # the setting's seconds
        (7, 5),
        (6, 5),  # exp - 1 = now + 5
        (5, 4),  # the second before exp: nginx serves an entry through the second it names
        (1, 0),
    ],
)
def test_a_verdict_is_kept_the_setting_s_seconds_never_past_exp(
    make_app, signing_key, lifetime_left, kept_until
):
    now = 1_900_000_000
    caching_client = make_app(
        AUTH_CHECK_CACHE_SECONDS="5", AUTH_CHECK_COOKIE="on", clock=ManualClock(now + 0.5)
    ).test_client()
    token = make_token(signing_key, valid_claims(iat=now, exp=now + lifetime_left))
    response = check(caching_client, headers=bearer(token))
    assert response.status_code == 200
    assert response.headers["X-Accel-Expires"] == f"@{now + kept_until}"
    assert response.headers["Cache-Control"] == "no-store"  # for any other cache


def test_refusals_and_cookie_verdicts_are_never_kept(caching_client, signing_key):
    user = bearer(login(caching_client)["accessToken"])
    for response in [
        check(caching_client, "role=admin", headers=user),
        check(caching_client, headers=bearer("x.y.z")),
        check(caching_client, "role=x", headers=user),
        check(caching_client),
    ]:
        assert response.status_code in {400, 401, 403}
        assert "X-Accel-Expires" not in response.headers
    response = check(with_cookie(caching_client, cookie_token(caching_client)))
    assert response.status_code == 200
    assert response.headers["X-Accel-Expires"] == "0"  # a logout counts at once
