"""Every answer of a real gunicorn says nosniff, whoever answers it."""

from __future__ import annotations

import pytest

from tests.helpers.servers import fresh


@pytest.mark.gunicorn
def test_gunicorn_answers_say_nosniff(gunicorn_server):
    server = gunicorn_server(workers=2)
    for method, path, status in [
        ("GET", "/healthz", 200),
        ("GET", "/x", 404),
        ("PUT", "/login", 405),
    ]:
        response = fresh(method, f"{server.url}{path}")
        assert response.status_code == status
        assert response.headers["X-Content-Type-Options"] == "nosniff"
