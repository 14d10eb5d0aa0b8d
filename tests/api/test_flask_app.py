"""The app create_app builds: plain Flask, set up only by the steps create_app names."""

from __future__ import annotations

import pytest
from flask import Flask

pytestmark = pytest.mark.store("sqlite")  # no store is involved


def test_the_app_is_flask_itself(app):
    assert type(app) is Flask


def test_views_and_hooks_run_on_every_request(client):
    for _ in range(3):
        response = client.post("/login", data={"username": "alice"})
        assert response.status_code == 200
        assert response.headers["Cache-Control"] == "no-store"  # the blueprint's hook ran
        token = response.get_json()["accessToken"]
        answer = client.get("/user-accessible", headers={"Authorization": f"Bearer {token}"})
        assert answer.get_json()["user"]["username"] == "alice"
