"""The Flask subclass the service runs on: only what it changes of Flask."""

from __future__ import annotations

import functools
import re

import pytest
from flask import Flask

pytestmark = pytest.mark.store("sqlite")  # no store is involved


def test_a_view_is_checked_for_async_once_and_then_served_as_it_is(app, monkeypatch):
    checks = []
    flask_check = Flask.ensure_sync

    def counted(self, func):
        checks.append(func)
        return flask_check(self, func)

    monkeypatch.setattr(Flask, "ensure_sync", counted)
    view = app.view_functions["resources.user_accessible"]
    assert app.ensure_sync(view) is view
    assert app.ensure_sync(view) is view
    assert checks == [view]


def test_callables_made_per_call_are_checked_each_time_and_never_kept(app):
    class Handler:
        def handle(self) -> str:
            return "answer"

    kept = dict(app._sync_functions)
    for _ in range(3):
        handler = Handler()
        assert app.ensure_sync(handler.handle)() == "answer"  # a new bound method each time
        assert app.ensure_sync(functools.partial(handler.handle))() == "answer"
    assert app._sync_functions == kept


def test_an_async_view_still_goes_through_flasks_own_handling(app):
    async def view() -> str:
        return "answer"

    try:
        expected = Flask.ensure_sync(app, view)
    except RuntimeError as error:  # without Flask's "async" extra: the same refusal
        with pytest.raises(RuntimeError, match=re.escape(str(error))):
            app.ensure_sync(view)
    else:
        assert app.ensure_sync(view)() == expected() == "answer"


def test_views_and_hooks_run_through_the_kept_answer(client):
    for _ in range(3):  # the second and third through the kept answer
        response = client.post("/login", data={"username": "alice"})
        assert response.status_code == 200
        assert response.headers["Cache-Control"] == "no-store"  # the blueprint's hook ran
        token = response.get_json()["accessToken"]
        answer = client.get("/user-accessible", headers={"Authorization": f"Bearer {token}"})
        assert answer.get_json()["user"]["username"] == "alice"
