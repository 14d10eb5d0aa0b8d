"""Rotation under gunicorn: of concurrent refreshes with one token on several workers,
exactly one rotates, on every store."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from app.config.settings import SQLITE_FILE_NAME
from tests.helpers.servers import fresh
from tests.helpers.stores import open_store

CONCURRENT = 8


@pytest.mark.store("sqlite", "redis", "postgresql")
@pytest.mark.gunicorn
@pytest.mark.parametrize("grace", ["0", "10"])
def test_of_concurrent_refreshes_on_gunicorn_workers_exactly_one_rotates(
    gunicorn_server, store_backend, tmp_path, grace
):
    server = gunicorn_server(
        {"REFRESH_TOKEN_ROTATION": "true", "REFRESH_TOKEN_REUSE_GRACE": grace}, workers=4
    )
    token = fresh("POST", f"{server.url}/login", json={"username": "alice"}).json()["refreshToken"]
    start = threading.Barrier(CONCURRENT, timeout=30)

    def refresh_at_once(_: int):
        start.wait()
        body = {"username": "alice", "refreshToken": token}
        response = fresh("POST", f"{server.url}/token", json=body)
        return response.status_code, response.json().get("refreshToken") if response.ok else None

    with ThreadPoolExecutor(CONCURRENT) as pool:
        answers = list(pool.map(refresh_at_once, range(CONCURRENT)))
    store = open_store(
        store_backend or f"sqlite:///{tmp_path / 'instance' / SQLITE_FILE_NAME}", timeout=2
    )
    live = [new for status, new in answers if new and store.owner_of(new)]
    store.close()
    if grace == "0":
        assert Counter(status for status, _ in answers) == {200: 1, 401: CONCURRENT - 1}
        assert live == []
    else:
        assert Counter(status for status, _ in answers) == {200: CONCURRENT}
        assert len(live) == 1
