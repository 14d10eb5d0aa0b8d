"""The floor: the service's routes answering its own responses as constants, and a line per request.

``FLOOR_ANSWERS`` names a JSON file, written by the bench from the service's own answers,
mapping ``"METHOD /path"`` to ``{"status", "headers", "body"}``. Each route answers that
status, those headers and that body (the same bytes) without reading the request: no auth,
no parsing. With ``FLOOR_STORE_URL`` (the store matrix), ``POST /login`` also makes one
write and ``POST /token`` one read on that store (bench/store_floor.py), and nothing more.

The bench loads it, as it loads the peers, through bench/request_line.py: one line per
request, as the service's request log writes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from flask import Flask, Response

#: The one store operation a route makes in the store matrix, by route.
STORE_OPERATIONS = {"POST /login": "write", "POST /token": "read"}


def constant_view(name: str, answer: dict, operation: Callable[[], None] | None) -> Callable:
    body, status = answer["body"].encode("latin-1"), answer["status"]
    headers = [tuple(header) for header in answer["headers"]]

    def view() -> Response:
        if operation is not None:
            operation()
        return Response(body, status=status, headers=headers)

    view.__name__ = name
    return view


def create() -> Flask:
    floor = Flask(__name__)
    operations: dict[str, Callable[[], None]] = {}
    if url := os.environ.get("FLOOR_STORE_URL"):
        from bench.store_floor import open_floor_store

        store = open_floor_store(url, os.environ["FLOOR_KNOWN_DIGEST"])
        operations = {route: getattr(store, name) for route, name in STORE_OPERATIONS.items()}
    answers = json.loads(Path(os.environ["FLOOR_ANSWERS"]).read_text())
    for index, (route, answer) in enumerate(answers.items()):
        method, path = route.split(" ", 1)
        view = constant_view(f"route_{index}", answer, operations.get(route))
        floor.add_url_rule(path, view_func=view, methods=[method])
    return floor


app = create()
