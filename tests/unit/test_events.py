"""Security events and refusal reasons are named once (app/events.py), and the metrics
know every one of them."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from app.auth.users import HASHER
from app.events import AUTH_FAILURE_REASONS, LIMIT_REASONS, Event, Reason
from app.observability.metrics import TOKEN_EVENT_OF, TOKEN_EVENTS, Metrics
from tests.helpers.metrics import parse
from tests.helpers.tokens import bearer, login
from tests.helpers.tools import ROOT

APP = ROOT / "app"
NAMED_FIELDS = {"reason", "event"}


def literal_names(path: Path, root: Path = ROOT) -> list[str]:
    """Return where ``path`` spells a reason or an event as a string literal, in order."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            values = [k.value for k in node.keywords if k.arg in NAMED_FIELDS]
            if isinstance(node.func, ast.Name) and node.func.id == "InvalidTokenError":
                values += node.args[1:2]  # its reason
        elif isinstance(node, ast.Dict):
            values = [
                value
                for key, value in zip(node.keys, node.values, strict=True)
                if isinstance(key, ast.Constant) and key.value in NAMED_FIELDS
            ]
        else:
            continue
        found += [
            (value.lineno, f"{path.relative_to(root)}:{value.lineno}")
            for value in values
            if isinstance(value, ast.Constant | ast.JoinedStr)
        ]
    return [where for _, where in sorted(found)]


def test_no_module_spells_a_reason_or_an_event_itself():
    spelled = [
        where
        for path in sorted(APP.rglob("*.py"))
        if path.name != "events.py"
        for where in literal_names(path)
    ]
    assert spelled == [], "name it in app/events.py and use the member"


#: Strings that equal a name of app/events.py but name something else.
HOMONYMS = {
    ("app/cli/tokens.py", "revoke"),  # a command
    ("app/observability/metrics.py", "rate_limited"),  # a slot
    ("app/views/auth.py", "login"),  # the rate limit's endpoint
    ("app/views/auth.py", "revoke"),  # the rate limit's endpoint
    ("app/views/oauth_server.py", "revoke"),  # the rate limit's endpoint, as DELETE /token's
    ("app/backends/redis/store.py", "login"),  # a Lua script's name
    ("app/backends/redis/store.py", "revoke"),  # a Lua script's name
}


def test_no_module_spells_a_known_name_anywhere():
    names = {member.value for member in Event} | {member.value for member in Reason}
    spelled = {
        (str(path.relative_to(ROOT)), node.value)
        for path in sorted(APP.rglob("*.py"))
        if path.name != "events.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and node.value in names
    }
    assert spelled <= HOMONYMS, spelled - HOMONYMS


def test_the_check_finds_a_literal(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text(
        'note(reason="made_up")\nlog(extra={"event": "made_up"})\n'
        'InvalidTokenError("m", "made_up")\nnote(event=Event.LOGIN)\nnote(user="alice")\n'
    )
    assert literal_names(source, tmp_path) == ["probe.py:1", "probe.py:2", "probe.py:3"]


def test_every_event_has_a_decision_in_the_metrics():
    assert set(TOKEN_EVENT_OF) == set(Event)
    assert set(TOKEN_EVENT_OF.values()) - {None} <= set(TOKEN_EVENTS)


def samples_of(metrics: Metrics) -> dict[tuple, float]:
    return parse(metrics.exposition().decode())


def test_every_reason_is_exported_from_the_start_and_counted():
    metrics = Metrics()
    before = samples_of(metrics)
    for reason in AUTH_FAILURE_REASONS:
        assert ("token_service_auth_failures_total", (("reason", reason),)) in before
    environ = {"REQUEST_METHOD": "GET"}
    for reason in Reason:
        status = 429 if reason in LIMIT_REASONS else 401
        metrics.observe(environ, status, 0.001, {"reason": reason})
    after = samples_of(metrics)
    for reason in AUTH_FAILURE_REASONS:
        assert after[("token_service_auth_failures_total", (("reason", reason),))] == 1
    assert after[("token_service_rate_limited_total", ())] == len(LIMIT_REASONS)
    labels = {dict(key[1]).get("reason") for key in after if key[0].startswith("token_service_a")}
    assert labels == set(AUTH_FAILURE_REASONS)  # nothing else became a label


def test_every_token_event_is_counted_as_the_metrics_say():
    metrics = Metrics()
    for event in Event:
        metrics.observe({"REQUEST_METHOD": "POST"}, 200, 0.001, {"event": event})
    after = samples_of(metrics)
    expected = dict.fromkeys(TOKEN_EVENTS, 0)
    for counted in TOKEN_EVENT_OF.values():
        if counted is not None:
            expected[counted] += 1
    assert {
        name: after[("token_service_tokens_total", (("event", name),))] for name in TOKEN_EVENTS
    } == expected


def test_every_note_of_a_tour_of_the_service_is_a_member(make_app, tmp_path):
    """Drive every refusal and event a request can have; each noted name is an enum member."""
    users_file = tmp_path / "users.json"
    users_file.write_text(json.dumps({"alice": HASHER.hash("a password")}))
    apps = [
        make_app(
            RATE_LIMIT_AUTH="3 per minute", RATE_LIMIT_EXEMPT="", LOGIN_FAILURE_LIMIT="1/hour"
        ),
        make_app(USERS_FILE=str(users_file), LOGIN_FAILURE_LIMIT="1 per hour"),
        make_app(REFRESH_TOKEN_ROTATION="true"),
    ]
    noted: list[tuple[str, object]] = []
    for app in apps:
        request_log = app.wsgi_app.app  # inside the forwarded headers' middleware
        observe = request_log.observe

        def spy(environ, status, seconds, notes, observe=observe):
            noted.extend((name, notes[name]) for name in NAMED_FIELDS & set(notes))
            observe(environ, status, seconds, notes)

        request_log.observe = spy
    open_login, directory, rotation = (app.test_client() for app in apps)
    tokens = login(open_login)
    open_login.get("/admin-accessible", headers=bearer(tokens["accessToken"]))
    open_login.get("/user-accessible", headers=bearer("a.b.c"))
    open_login.get("/user-accessible")
    open_login.post("/token", json={"username": "bob", "refreshToken": tokens["refreshToken"]})
    open_login.post("/token", json={"username": "alice", "refreshToken": "x"})
    open_login.delete(f"/token/{tokens['refreshToken']}")
    for _ in range(3):  # the last over RATE_LIMIT_AUTH
        open_login.post("/login", json={"username": "alice"})
    open_login.get("/api/v1/me")
    for _ in range(2):  # a failure, then over LOGIN_FAILURE_LIMIT
        directory.post("/login", json={"username": "alice", "password": "wrong"})
    first = login(rotation)["refreshToken"]
    rotation.post("/token", json={"username": "alice", "refreshToken": first})
    rotation.post("/token", json={"username": "alice", "refreshToken": first})  # reuse
    kinds = {(name, type(value)) for name, value in noted}
    assert kinds == {("reason", Reason), ("event", Event)}, noted
    names = {value for _, value in noted}
    assert {Reason.WRONG_ROLE, Reason.BAD_CREDENTIALS, Reason.LOGIN_LIMITED} <= names
    assert {Event.LOGIN, Event.REVOKE, Event.RATE_LIMITED, Event.REFRESH_TOKEN_REUSE} <= names
