"""The sessions API: ``/sessions`` (the caller's own) and ``/admin/users/{username}/sessions``
(an admin's view of anyone's): 401 before 403, another user's id is 404 like an unknown one,
paging, and every end of a session a security event."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.clock import ManualClock
from tests.helpers.openapi import assert_documented, document_of, validator
from tests.helpers.tokens import bearer, login

pytestmark = pytest.mark.store("sqlite")  # the stores' own suites run on every backend

UNKNOWN_ID = "AAAAAAAAAAAAAAAAAAAAAA"
OWN = ["/sessions", f"/sessions/{UNKNOWN_ID}"]
ADMIN = ["/admin/users/bob/sessions", f"/admin/users/bob/sessions/{UNKNOWN_ID}"]
#: Every endpoint of the API, by method and path.
ENDPOINTS = [
    ("GET", "/sessions"),
    ("DELETE", "/sessions"),
    ("DELETE", f"/sessions/{UNKNOWN_ID}"),
    ("GET", "/admin/users/bob/sessions"),
    ("DELETE", "/admin/users/bob/sessions"),
    ("DELETE", f"/admin/users/bob/sessions/{UNKNOWN_ID}"),
]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def client(make_app, clock):
    return make_app(clock=clock).test_client()


def log_in(client, username: str, agent: str = "test-agent/1.0") -> dict[str, str]:
    return login(client, username, headers={"User-Agent": agent})


def sessions_of(client, token: str, path: str = "/sessions", **query: str) -> dict:
    response = client.get(path, headers=bearer(token), query_string=query)
    assert response.status_code == 200, response.data
    return response.get_json()


def refreshes(client, username: str, tokens: dict[str, str]) -> int:
    body = {"username": username, "refreshToken": tokens["refreshToken"]}
    return client.post("/token", json=body).status_code


def without_request_id(headers) -> list[tuple[str, str]]:
    return [(name, value) for name, value in headers if name != "X-Request-ID"]


def lines(out: str) -> list[dict]:
    """Return the request log's lines in ``out``, a test's standard output."""
    parsed = [json.loads(line) for line in out.splitlines() if line[:1] == "{"]
    return [line for line in parsed if line.get("logger") == "request"]


# --- who may call -----------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_no_token_is_401_on_every_endpoint(client, method, path):
    response = client.open(path, method=method)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize(("method", "path"), ENDPOINTS[3:])
def test_a_user_is_403_on_the_admin_endpoints_whatever_the_username_or_id(client, method, path):
    token = log_in(client, "alice")["accessToken"]
    assert client.open(path, method=method, headers=bearer(token)).status_code == 403
    odd = path.replace("bob", "no%00body")
    assert client.open(odd, method=method, headers=bearer(token)).status_code == 403


# --- one's own sessions -------------------------------------------------------------------


def test_a_user_sees_their_own_sessions_newest_first_and_no_one_else_s(client, clock):
    first = log_in(client, "alice", "first-browser")
    clock.advance(5)
    second = log_in(client, "alice", "second-browser")
    log_in(client, "bob", "bob's browser")
    page = sessions_of(client, second["accessToken"])
    assert page["next"] is None
    assert [session["userAgent"] for session in page["sessions"]] == [
        "second-browser",
        "first-browser",
    ]
    newest = page["sessions"][0]
    assert set(newest) == {"id", "loggedInAt", "lastUsedAt", "address", "userAgent"}
    assert newest["loggedInAt"] == int(clock.now)
    assert newest["lastUsedAt"] % 60 == 0
    assert newest["address"] == "127.0.0.1"
    assert refreshes(client, "alice", first) == 200  # listing ends nothing


def test_ending_one_s_own_session_revokes_its_refresh_token_only(client, clock):
    kept = log_in(client, "alice", "kept")
    clock.advance(1)
    ended = log_in(client, "alice", "ended")
    (newest, _) = sessions_of(client, kept["accessToken"])["sessions"]
    response = client.delete(f"/sessions/{newest['id']}", headers=bearer(kept["accessToken"]))
    assert (response.status_code, response.data) == (204, b"")
    assert refreshes(client, "alice", ended) == 401
    assert refreshes(client, "alice", kept) == 200
    # its access token lives on until it expires: only "everywhere" sets a cut-off
    assert client.get("/user-accessible", headers=bearer(ended["accessToken"])).status_code == 200
    again = client.delete(f"/sessions/{newest['id']}", headers=bearer(kept["accessToken"]))
    assert again.status_code == 404


def test_another_user_s_session_id_is_404_exactly_like_an_unknown_one(client):
    alice = log_in(client, "alice")
    bob = log_in(client, "bob")
    (bobs,) = sessions_of(client, bob["accessToken"])["sessions"]
    theirs = client.delete(f"/sessions/{bobs['id']}", headers=bearer(alice["accessToken"]))
    unknown = client.delete(f"/sessions/{UNKNOWN_ID}", headers=bearer(alice["accessToken"]))
    misshapen = client.delete("/sessions/not*an*id", headers=bearer(alice["accessToken"]))
    for answer in (theirs, unknown, misshapen):
        assert answer.status_code == 404
        assert answer.get_json() == {"message": "no such session"}
        assert without_request_id(answer.headers) == without_request_id(theirs.headers)
    assert refreshes(client, "bob", bob) == 200


def test_logging_out_everywhere_ends_every_session_and_refuses_the_access_tokens(client, clock):
    first = log_in(client, "alice")
    second = log_in(client, "alice")
    bob = log_in(client, "bob")
    response = client.delete("/sessions", headers=bearer(first["accessToken"]))
    assert (response.status_code, response.get_json()) == (200, {"ended": 2})
    for tokens in (first, second):
        assert refreshes(client, "alice", tokens) == 401
        refused = client.get("/user-accessible", headers=bearer(tokens["accessToken"]))
        assert refused.status_code == 401
    assert client.get("/user-accessible", headers=bearer(bob["accessToken"])).status_code == 200
    clock.advance(1)  # a login in the cut-off's own second would wait for the next one
    after = log_in(client, "alice")
    assert client.get("/user-accessible", headers=bearer(after["accessToken"])).status_code == 200
    assert len(sessions_of(client, after["accessToken"])["sessions"]) == 1


# --- an admin's view of anyone's ----------------------------------------------------------


def test_an_admin_lists_and_ends_a_user_s_sessions(client, clock):
    admin = log_in(client, "admin")["accessToken"]
    kept = log_in(client, "bob", "kept")
    clock.advance(1)
    ended = log_in(client, "bob", "ended")
    page = sessions_of(client, admin, "/admin/users/bob/sessions")
    assert [session["userAgent"] for session in page["sessions"]] == ["ended", "kept"]
    path = f"/admin/users/bob/sessions/{page['sessions'][0]['id']}"
    assert client.delete(path, headers=bearer(admin)).status_code == 204
    assert refreshes(client, "bob", ended) == 401
    assert refreshes(client, "bob", kept) == 200
    assert client.delete(path, headers=bearer(admin)).status_code == 404
    # the admin's own sessions are not bob's: an id of one is 404 under the other
    (own,) = sessions_of(client, admin)["sessions"]
    crossed = client.delete(f"/admin/users/bob/sessions/{own['id']}", headers=bearer(admin))
    assert crossed.get_json() == {"message": "no such session"}


def test_an_admin_logs_a_user_out_everywhere(client, clock):
    admin = log_in(client, "admin")["accessToken"]
    bob = log_in(client, "bob")
    response = client.delete("/admin/users/bob/sessions", headers=bearer(admin))
    assert (response.status_code, response.get_json()) == (200, {"ended": 1})
    assert refreshes(client, "bob", bob) == 401
    assert client.get("/user-accessible", headers=bearer(bob["accessToken"])).status_code == 401
    assert client.get("/admin-accessible", headers=bearer(admin)).status_code == 200
    again = client.delete("/admin/users/bob/sessions", headers=bearer(admin))
    assert again.get_json() == {"ended": 0}


@pytest.mark.parametrize("path", ["/sessions", "/admin/users/bob/sessions"])
@pytest.mark.parametrize("query", ["?id=x", "?limit=1", "?", "?&"])
def test_a_query_on_logging_out_everywhere_is_400_and_ends_nothing(client, path, query):
    admin = log_in(client, "admin")["accessToken"]
    bob = log_in(client, "bob")
    caller = admin if path.startswith("/admin/") else bob["accessToken"]
    response = client.delete(path + query, headers=bearer(caller))
    if query == "?":  # an empty query is none
        assert response.status_code == 200
        return
    assert (response.status_code, response.get_json()) == (
        400,
        {"message": "logging out everywhere takes no query"},
    )
    assert refreshes(client, "bob", bob) == 200


@pytest.mark.parametrize("name", ["bob/sessions", "a/sessions/b", "a/sessions/sessions"])
def test_a_username_holding_sessions_is_listed_ended_and_logged_out_whole(client, name):
    admin = log_in(client, "admin")["accessToken"]
    tokens = [log_in(client, name), log_in(client, name)]
    path = f"/admin/users/{quote(name, safe='')}/sessions"
    listed = sessions_of(client, admin, path)["sessions"]
    assert len(listed) == 2
    one = client.delete(f"{path}/{listed[0]['id']}", headers=bearer(admin))
    assert one.status_code == 204
    everywhere = client.delete(path, headers=bearer(admin))
    assert (everywhere.status_code, everywhere.get_json()) == (200, {"ended": 1})
    assert [refreshes(client, name, each) for each in tokens] == [401, 401]


def test_a_username_with_a_slash_or_spaces_is_routed_whole(client):
    admin = log_in(client, "admin")["accessToken"]
    log_in(client, "team/ann smith")
    page = sessions_of(client, admin, f"/admin/users/{quote('team/ann smith', safe='')}/sessions")
    assert len(page["sessions"]) == 1
    assert sessions_of(client, admin, "/admin/users/team/sessions")["sessions"] == []


def test_a_name_no_login_accepts_is_no_user(client):
    admin = log_in(client, "admin")["accessToken"]
    for name in ["a\x00b", "line\nbreak", " ", "x" * 257, "bidi\u202e"]:
        for method, suffix in [("GET", ""), ("DELETE", ""), ("DELETE", f"/{UNKNOWN_ID}")]:
            path = f"/admin/users/{quote(name, safe='')}/sessions{suffix}"
            response = client.open(path, method=method, headers=bearer(admin))
            expected = (404, {"message": "no such user"})
            assert (response.status_code, response.get_json()) == expected, name


# --- paging -------------------------------------------------------------------------------


def test_pages_follow_one_another_with_the_cursor_and_the_last_has_none(client, clock):
    for number in range(5):
        tokens = log_in(client, "alice", f"browser {number}")
        clock.advance(1)
    token = tokens["accessToken"]
    seen = []
    query: dict[str, str] = {"limit": "2"}
    sizes = []
    while True:
        page = sessions_of(client, token, **query)
        sizes.append(len(page["sessions"]))
        seen += [session["userAgent"] for session in page["sessions"]]
        if page["next"] is None:
            break
        query["after"] = page["next"]
    assert sizes == [2, 2, 1]
    assert seen == [f"browser {number}" for number in reversed(range(5))]
    assert len(sessions_of(client, token)["sessions"]) == 5  # limit's default: 50


#: Each bad query, and the 400's message.
BAD_QUERIES = [
    ("limit=0", "limit must be a whole number from 1 to 100"),
    ("limit=101", "limit must be a whole number from 1 to 100"),
    ("limit=-1", "limit must be a whole number from 1 to 100"),
    ("limit=1.5", "limit must be a whole number from 1 to 100"),
    ("limit=", "limit must be a whole number from 1 to 100"),
    ("limit=%EF%BC%95", "limit must be a whole number from 1 to 100"),  # a fullwidth 5
    ("limit=1&limit=2", "give limit and after at most once each"),
    ("after=", "after is not a cursor of this list"),
    ("after=%0A", "after is not a cursor of this list"),
    ("after=1.x&after=1.y", "give limit and after at most once each"),
    ("after=not-a-cursor", "after is not a cursor of this list"),  # the store's ValueError
    ("page=2", "the query takes only limit and after"),
]


def test_a_bad_query_is_400(client):
    token = log_in(client, "admin")["accessToken"]
    for path in ["/sessions", "/admin/users/alice/sessions"]:
        for query, message in BAD_QUERIES:
            response = client.get(f"{path}?{query}", headers=bearer(token))
            assert (response.status_code, response.get_json()) == (400, {"message": message})


def test_limits_at_the_edges_are_taken(client):
    token = log_in(client, "alice")["accessToken"]
    assert len(sessions_of(client, token, limit="1")["sessions"]) == 1
    assert len(sessions_of(client, token, limit="100")["sessions"]) == 1


PATH_TEXT = st.text(st.characters(codec="utf-8"), min_size=1, max_size=40)
QUERY_TEXT = st.text(st.characters(codec="utf-8"), max_size=40)


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    method=st.sampled_from(["GET", "DELETE", "POST", "HEAD"]),
    shape=st.sampled_from(
        ["/sessions/{a}", "/admin/users/{a}/sessions", "/admin/users/{a}/sessions/{b}"]
    ),
    first=PATH_TEXT,
    second=PATH_TEXT,
    limit=QUERY_TEXT,
    after=QUERY_TEXT,
)
def test_hostile_path_segments_and_query_values_never_reach_a_5xx(
    admin_client, method, shape, first, second, limit, after
):
    client, token = admin_client
    path = shape.format(a=quote(first, safe=""), b=quote(second, safe=""))
    query = {"limit": limit, "after": after}
    response = client.open(path, method=method, headers=bearer(token), query_string=query)
    assert response.status_code < 500
    response = client.get("/sessions", headers=bearer(token), query_string=query)
    assert response.status_code in {200, 400}


@pytest.fixture
def admin_client(client):
    return client, log_in(client, "admin")["accessToken"]


# --- the record of it ---------------------------------------------------------------------


def test_every_end_of_a_session_is_a_security_event_on_the_request_s_line(client, capfd):
    admin = log_in(client, "admin")["accessToken"]
    alice = log_in(client, "alice")
    (own,) = sessions_of(client, alice["accessToken"])["sessions"]
    capfd.readouterr()
    client.delete(f"/sessions/{own['id']}", headers=bearer(alice["accessToken"]))
    client.delete(f"/sessions/{UNKNOWN_ID}", headers=bearer(alice["accessToken"]))
    client.delete("/sessions", headers=bearer(alice["accessToken"]))
    client.delete(f"/admin/users/bob/sessions/{UNKNOWN_ID}", headers=bearer(admin))
    client.delete("/admin/users/bob/sessions", headers=bearer(admin))
    out = capfd.readouterr().out
    logged = [(line["status"], line["user"], line.get("event")) for line in lines(out)]
    assert logged == [
        (204, "alice", "session_ended"),
        (404, "alice", None),
        (200, "alice", "logged_out_everywhere"),
        (404, "admin", None),
        (200, "admin", "logged_out_everywhere"),
    ]
    assert alice["refreshToken"] not in out
    assert alice["accessToken"] not in out


# --- the API document -----------------------------------------------------------------------


def test_every_answer_is_one_the_api_document_lists(client):
    document = document_of(client)
    admin = bearer(log_in(client, "admin")["accessToken"])
    token = log_in(client, "alice", "<b>agent</b>")["accessToken"]
    user = bearer(token)
    for _ in range(2):
        log_in(client, "alice")
    (session, *_) = sessions_of(client, token)["sessions"]
    own_id = session["id"]
    validator(document, {"$ref": "#/components/schemas/Session"}).validate(session)
    own, admins = "/sessions", "/admin/users/{username}/sessions"
    calls = [
        ("get", own, "/sessions?limit=2", user, 200),
        ("head", own, "/sessions", user, 200),
        ("get", own, "/sessions?limit=0", user, 400),
        ("get", own, "/sessions", {}, 401),
        ("get", admins, "/admin/users/alice/sessions?limit=1", admin, 200),
        ("get", admins, "/admin/users/alice/sessions?after=x", admin, 400),
        ("get", admins, "/admin/users/alice/sessions", user, 403),
        ("get", admins, "/admin/users/a%00/sessions", admin, 404),
        ("delete", own + "/{id}", f"/sessions/{own_id}", user, 204),
        ("delete", own + "/{id}", f"/sessions/{own_id}", user, 404),
        ("delete", own + "/{id}", f"/sessions/{own_id}", {}, 401),
        ("delete", admins + "/{id}", f"/admin/users/alice/sessions/{UNKNOWN_ID}", admin, 404),
        ("delete", admins + "/{id}", f"/admin/users/alice/sessions/{UNKNOWN_ID}", user, 403),
        ("delete", admins, "/admin/users/a%00/sessions", admin, 404),
        ("delete", admins, "/admin/users/alice/sessions", user, 403),
        ("delete", admins, "/admin/users/bob/sessions", admin, 200),
        ("delete", own, "/sessions", {}, 401),
        ("delete", own, "/sessions", user, 200),
    ]
    for method, documented_path, path, headers, status in calls:
        response = client.open(path, method=method, headers=headers)
        assert response.status_code == status, (method, path, response.data)
        assert_documented(document, method, documented_path, response)


# --- on every store -------------------------------------------------------------------------


@pytest.mark.store("sqlite", "redis", "postgresql")
def test_the_api_walks_the_same_on_every_store(client, clock):
    admin = bearer(log_in(client, "admin")["accessToken"])
    name = "Zoë/team 🙂"
    first = log_in(client, name, "first")
    clock.advance(1)
    second = log_in(client, name, "x" * 300)
    path = f"/admin/users/{quote(name, safe='')}/sessions"
    page = sessions_of(client, admin["Authorization"][7:], path, limit="1")
    (newest,) = page["sessions"]
    assert newest["userAgent"] == "x" * 256  # cut to 256 characters
    (oldest,) = sessions_of(client, first["accessToken"], after=page["next"])["sessions"]
    assert oldest["userAgent"] == "first"
    for hostile in [f"{UNKNOWN_ID[:-1]}%00", "%C3%A9" * 30, "a" * 64]:
        answer = client.delete(f"/sessions/{hostile}", headers=bearer(first["accessToken"]))
        assert answer.status_code == 404
    assert client.delete(f"{path}/{oldest['id']}", headers=admin).status_code == 204
    assert refreshes(client, name, first) == 401
    assert refreshes(client, name, second) == 200
    for after in ["1.%00", "99999999999999.x", "0.x"]:
        answer = client.get(f"/sessions?after={after}", headers=bearer(second["accessToken"]))
        assert answer.status_code in {200, 400}
