"""The floor of the benchmark: the service's routes answering constant responses, no work.

``FLOOR_ANSWERS`` names a JSON file, written by bench/run.py from the service's own
answers, mapping ``"METHOD /path"`` to ``{"status", "headers", "body"}``. Each route
answers that status, those headers and that body (the same bytes, hence the same
size) without reading the request: no auth, no parsing, no store.

The store matrix's floor (bench/matrix.py) is the same app with ``FLOOR_STORE_URL``
set: then ``POST /login`` also makes one write and ``POST /token`` one read on that
store (bench/store_floor.py), and nothing more.
"""

import json
import os
from collections.abc import Callable
from pathlib import Path

from flask import Flask, Response

app = Flask(__name__)
#: The one store operation a route makes in the store matrix, by route.
STORE_OPERATIONS = {"POST /login": "write", "POST /token": "read"}


def constant_view(name: str, answer: dict, operation: Callable[[], None] | None = None):
    body = answer["body"].encode("latin-1")
    status = answer["status"]
    headers = [tuple(header) for header in answer["headers"]]

    if operation is None:

        def view() -> Response:
            return Response(body, status=status, headers=headers)
    else:

        def view() -> Response:
            operation()
            return Response(body, status=status, headers=headers)

    view.__name__ = name
    return view


def store_operations() -> dict[str, Callable[[], None]]:
    """Return the store operation of each route, if FLOOR_STORE_URL names a store."""
    url = os.environ.get("FLOOR_STORE_URL")
    if not url:
        return {}
    from store_floor import open_floor_store  # bench/ is the floor's working folder

    store = open_floor_store(url, os.environ["FLOOR_KNOWN_DIGEST"])
    return {route: getattr(store, name) for route, name in STORE_OPERATIONS.items()}


operations = store_operations()
for index, (route, answer) in enumerate(
    json.loads(Path(os.environ["FLOOR_ANSWERS"]).read_text()).items()
):
    method, path = route.split(" ", 1)
    view = constant_view(f"route_{index}", answer, operations.get(route))
    app.add_url_rule(path, view_func=view, methods=[method])
