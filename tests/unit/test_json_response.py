"""JSON answers: what a view's dict or jsonify writes, the bytes clients have always had."""

from __future__ import annotations

import datetime
import json

import pytest
from flask import jsonify

CLAIMS = {"username": "alice", "role": "user", "iat": 1_700_000_000, "exp": 1_700_000_060}


@pytest.mark.parametrize(
    "payload",
    [
        {"message": "for all users", "user": CLAIMS},
        {"user": CLAIMS, "guestsCount": 4},
        {"user": CLAIMS, "guestsCount": 2.5},
        {"user": CLAIMS, "guestsCount": 1e-05},
        {"user": CLAIMS, "guestsCount": 1e16},
        {"user": CLAIMS, "guestsCount": 10**20},
        {"user": CLAIMS, "guestsCount": -(2**63)},
        {"message": "for all users", "user": {**CLAIMS, "username": "Zoë 山田 \N{GRINNING FACE}"}},
        {"user": {**CLAIMS, "username": "".join(chr(n) for n in range(128))}},
        {"source": "corp", "id": "u-1", "shownName": 'A "quoted" \\ name'},
        {"status": "ok"},
        {"accessToken": "eyJ.x.y", "refreshToken": "a" * 42},
        {"user": {**CLAIMS, "scores": [0.1, 1e-05, 2]}},  # floats nested
        {"user": {**CLAIMS, "nan": float("nan"), "inf": float("inf")}},
        {"user": {**CLAIMS, "big": [2**64]}},
        {1: "a key that is no string", "flags": (True, False, None)},
        {"user": {**CLAIMS, "delete": "\x7f"}},
    ],
    ids=repr,
)
def test_an_answer_is_compact_ascii_json_in_the_order_built(app, payload):
    """Compact, escaped to ASCII, keys as the view put them, one newline: as ever."""
    expected = json.dumps(payload, separators=(",", ":")).encode() + b"\n"
    with app.test_request_context():
        returned = app.make_response(payload)  # a view's dict
        jsonified = jsonify(payload)
    for response in (returned, jsonified):
        assert response.status_code == 200
        assert response.get_data() == expected
        assert response.headers["Content-Type"] == "application/json"
        assert response.headers["Content-Length"] == str(len(expected))


def test_a_date_is_written_as_flask_writes_it(app):
    moment = datetime.datetime(2026, 1, 31, 12, 0, tzinfo=datetime.UTC)
    with app.test_request_context():
        assert jsonify({"at": moment}).get_data() == b'{"at":"Sat, 31 Jan 2026 12:00:00 GMT"}\n'
