"""json_response: orjson's speed, jsonify's bytes, for every payload a view may build."""

from __future__ import annotations

import pytest
from flask import jsonify

from app.http.responses import json_response

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
    ],
    ids=repr,
)
def test_json_response_is_byte_for_byte_jsonify(app, payload):
    with app.app_context():
        fast, reference = json_response(payload), jsonify(payload)
    assert fast.status_code == reference.status_code == 200
    assert fast.get_data() == reference.get_data()
    assert fast.headers["Content-Type"] == reference.headers["Content-Type"]
    assert fast.headers["Content-Length"] == reference.headers["Content-Length"]
