"""Hostile JSON bodies: deep nesting is refused with a 400, and no body reaches a 500."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.config.settings import MAX_BODY_BYTES
from app.http.errors import error_summary
from app.http.request_body import MAX_JSON_DEPTH, _nested_too_deep
from tests.helpers.tokens import bearer, login

pytestmark = pytest.mark.store("sqlite")  # bodies are read before any store is involved

DEPTHS = [1, 31, 32, 33, 100, 500, 1000, 1023, 1024, 5000]
ENDPOINTS = ["/login", "/token", "/restaurant-reservation"]
TOO_DEEP = {"message": f"request body is nested deeper than {MAX_JSON_DEPTH} levels"}
BOUNDED = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def nested(kind: str, depth: int, inner: str = "1") -> str:
    """Return ``inner`` wrapped in ``depth`` objects or arrays, as JSON text."""
    if kind == "object":
        return '{"":' * depth + inner + "}" * depth
    return "[" * depth + inner + "]" * depth


def depth_of(document: Any) -> int:
    """Return how deep objects and arrays nest in ``document`` (walked without recursion)."""
    deepest, pending = 0, [(document, 1)]
    while pending:
        value, level = pending.pop()
        if isinstance(value, dict | list):
            deepest = max(deepest, level)
            items = value.values() if isinstance(value, dict) else value
            pending.extend((item, level + 1) for item in items)
    return deepest


@pytest.fixture(scope="module")
def service(shared_app):
    """Return a client without rate limits, and the fields each endpoint needs to answer 200:
    the module's, as its tests only send bodies and read the answers (the refresh token
    stays valid: rotation is off)."""
    client = shared_app(RATE_LIMIT_AUTH="off").test_client()
    tokens = login(client, "alice")
    fields = {
        "/login": {"username": "alice", "password": "pw"},
        "/token": {"username": "alice", "refreshToken": tokens["refreshToken"]},
        "/restaurant-reservation": {"guestsCount": 4},
    }
    return client, bearer(tokens["accessToken"]), fields


def post(service, path: str, body: str | bytes, content_type: str = "application/json"):
    client, authorization, _ = service
    headers = authorization if path == "/restaurant-reservation" else {}
    return client.post(path, data=body, content_type=content_type, headers=headers)


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize("kind", ["object", "array"])
@pytest.mark.parametrize("depth", DEPTHS)
def test_a_body_nested_beyond_32_levels_is_400_and_within_is_served(service, path, kind, depth):
    fields = json.dumps(service[2][path])
    # the body itself is level 1; its extra field holds the other depth - 1 levels
    body = fields if depth == 1 else fields[:-1] + f', "extra": {nested(kind, depth - 1)}}}'
    response = post(service, path, body)
    if len(body) > MAX_BODY_BYTES:  # 5,000 objects take 25,000 bytes at least
        assert response.status_code == 413
    elif depth <= MAX_JSON_DEPTH:
        assert response.status_code == 200, response.data
    else:
        assert response.status_code == 400
        assert response.get_json() == TOO_DEEP


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize("kind", ["object", "array"])
@pytest.mark.parametrize("depth", DEPTHS)
def test_bare_nesting_is_400_and_says_why(service, path, kind, depth):
    body = nested(kind, depth)
    response = post(service, path, body)
    if len(body) > MAX_BODY_BYTES:
        assert response.status_code == 413
        return
    assert response.status_code == 400
    message = response.get_json()["message"]
    if depth > MAX_JSON_DEPTH:
        assert response.get_json() == TOO_DEEP
    elif kind == "array":
        assert message == "request body must be a JSON object"
    else:
        assert message.endswith("is required")  # an object without the endpoint's fields


@pytest.mark.parametrize(
    ("body", "message"),
    [
        # the standard parser's bodies (orjson refuses them) have the same limit
        ('{"u": NaN, "x": ' + nested("array", 32) + "}", TOO_DEEP["message"]),
        ('{"u": NaN, "x": ' + nested("array", 31) + "}", "request body is not valid JSON"),
        (nested("object", 40).encode("utf-16"), TOO_DEEP["message"]),
        # brackets inside strings are not nesting
        ('{"username": "' + "[{" * 100 + '", "password": "\\"[\\\\"}', None),
        ('{"username": "alice", "x": "' + "[" * 40 + '\\\\"}', None),
        # unbalanced: refused either way, never 500
        ("[" * 5000, TOO_DEEP["message"]),
        ('{"a": [}' + "[]" * 40, "request body is not valid JSON"),
        ('{"a": "' + '\\"' * 5000 + "\\", "request body is not valid JSON"),
    ],
)
def test_the_limit_holds_on_every_parser_and_ignores_strings(service, body, message):
    response = post(service, "/login", body)
    if message is None:
        assert response.status_code == 200, response.data
    else:
        assert response.status_code == 400
        assert response.get_json() == {"message": message}


def test_a_plus_json_type_has_the_limit_too(service):
    response = post(service, "/login", nested("array", 33), "application/vnd.api+json")
    assert response.get_json() == TOO_DEEP


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=60,
)


@st.composite
def deep_values(draw: st.DrawFn) -> Any:
    """Return a chain of objects and arrays, each level either kind, from 1 to 6,000 deep."""
    value: Any = draw(st.sampled_from([1, "x", None, [], {}]))
    for kind in draw(st.lists(st.sampled_from("ol"), min_size=1, max_size=6000)):
        value = {"a": value} if kind == "o" else [value]
    return value


@st.composite
def documents(draw: st.DrawFn, fields: dict[str, Any]) -> Any:
    """Return any JSON value: alone, deep, or beside an endpoint's fields."""
    value = draw(json_values | deep_values())
    if draw(st.booleans()):
        return {**fields, "extra": value}
    return value


def deep_dumps(value: Any) -> str:
    """Return ``value`` as JSON, however deep (json.dumps recurses)."""
    parts: list[str] = []
    pending: list[Any] = [value]  # values, and text to write as it is (in a tuple)
    while pending:
        item = pending.pop()
        if isinstance(item, tuple):
            parts.append(item[0])
        elif isinstance(item, dict | list):
            opening, closing = "{}" if isinstance(item, dict) else "[]"
            pending.append((closing,))
            children = list(item.items()) if isinstance(item, dict) else list(item)
            for number, child in enumerate(reversed(children)):
                if isinstance(item, dict):
                    pending.extend([child[1], (json.dumps(child[0]) + ":",)])
                else:
                    pending.append(child)
                if number < len(children) - 1:
                    pending.append((",",))
            parts.append(opening)
        else:
            parts.append(json.dumps(item))
    return "".join(parts)


@pytest.mark.parametrize("path", ENDPOINTS)
@BOUNDED
@given(data=st.data())
def test_any_json_value_within_the_body_limit_is_answered_below_500(service, path, data):
    document = data.draw(documents(service[2][path]))
    body = deep_dumps(document).encode()
    if len(body) > MAX_BODY_BYTES:
        body = body[:MAX_BODY_BYTES]  # cut: no longer JSON, still answered below 500
    response = post(service, path, body)
    assert response.status_code < 500, response.data[:200]
    if len(body) < MAX_BODY_BYTES and depth_of(document) > MAX_JSON_DEPTH:
        assert response.get_json() == TOO_DEEP
    else:
        assert response.get_json(silent=True) != TOO_DEEP


@settings(BOUNDED, max_examples=300)
@given(document=json_values | deep_values(), indent=st.sampled_from([None, 1]))
def test_the_depth_is_read_exactly(document, indent):
    text = json.dumps(document, indent=indent) if depth_of(document) < 500 else deep_dumps(document)
    assert _nested_too_deep(text) == (depth_of(document) > MAX_JSON_DEPTH)


def test_deep_dumps_writes_json():
    value = {"a": [1, {"b": "]"}, [], {}, ","], "c": None, "d": {"e": ["}"]}}
    assert json.loads(deep_dumps(value)) == value


# --- an unexpected error logs one bounded line ---------------------------------------


def recurse(depth: int) -> None:
    if depth == 0:
        raise ValueError("secret internals\n" + "x" * 1_000_000)
    recurse(depth - 1)


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_an_unexpected_error_logs_one_line_of_at_most_2_kb(make_app, caplog, log_format):
    app = make_app(LOG_FORMAT=log_format)

    @app.get("/deep-bug")
    def deep_bug():
        recurse(800)

    with caplog.at_level(logging.ERROR):
        response = app.test_client().get("/deep-bug")
    assert response.status_code == 500
    assert response.get_json() == {"message": "internal server error"}
    [record] = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert record.exc_info is None  # no traceback
    handler = next(iter(logging.getLogger().handlers), None)
    formatter = handler.formatter if handler and handler.formatter else logging.Formatter()
    line = formatter.format(record)
    assert "\n" not in line
    assert len(line.encode()) <= 2048
    message = record.getMessage()
    assert message.startswith("unhandled error: ValueError: 'secret internals\\n")
    assert "system/test_hostile_bodies.py:" in message
    assert message.count(" recurse") == 5  # the innermost five frames, no more


def test_a_recursion_error_names_its_innermost_frames():
    def forever(depth: int) -> int:
        return forever(depth + 1)

    try:
        forever(0)
    except RecursionError as error:
        summary = error_summary(error)
    assert summary.startswith("RecursionError: 'maximum recursion depth exceeded")
    assert summary.count(" forever") == 5
    assert len(summary) <= 2048


def test_an_error_whose_str_fails_is_still_summarised():
    class BrokenError(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    summary = error_summary(BrokenError())
    assert "BrokenError: '?' at ?" in summary


@pytest.mark.gunicorn
def test_gunicorn_answers_deep_bodies_400_and_logs_little(gunicorn_server, signing_secret):
    """As the service runs: deep bodies are 400 on every endpoint, and the log stays short."""
    server = gunicorn_server(
        {"SIGNING_SECRET": signing_secret, "RATE_LIMIT_AUTH": "off", "LOG_LEVEL": "INFO"},
        workers=1,
    )
    session = requests.Session()
    tokens = session.post(f"{server.url}/login", json={"username": "alice"}, timeout=10).json()
    size_before = server.log_path.stat().st_size
    for path in ENDPOINTS:
        for depth in (500, 1000, 1023):
            for kind in ("object", "array"):
                response = session.post(
                    f"{server.url}{path}",
                    data=nested(kind, depth),
                    headers={"Content-Type": "application/json", **bearer(tokens["accessToken"])},
                    timeout=10,
                )
                assert response.status_code == 400, (path, depth, kind, response.text)
                assert response.json() == TOO_DEEP
    session.close()
    # 18 requests: one access-log line each, never a traceback
    grown = server.log_path.stat().st_size - size_before
    assert grown < 18 * 2048, server.log_path.read_text()[-2000:]
    assert "Traceback" not in server.log_path.read_text()
