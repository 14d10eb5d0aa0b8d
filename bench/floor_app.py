"""The floor of the benchmark: the service's routes answering constant responses, no work.

``FLOOR_ANSWERS`` names a JSON file, written by bench/run.py from the service's own
answers, mapping ``"METHOD /path"`` to ``{"status", "headers", "body"}``. Each route
answers that status, those headers and that body (the same bytes, hence the same
size) without reading the request: no auth, no parsing, no store.
"""

import json
import os
from pathlib import Path

from flask import Flask, Response

app = Flask(__name__)


def constant_view(name: str, answer: dict):
    body = answer["body"].encode("latin-1")
    status = answer["status"]
    headers = [tuple(header) for header in answer["headers"]]

    def view() -> Response:
        return Response(body, status=status, headers=headers)

    view.__name__ = name
    return view


for index, (route, answer) in enumerate(
    json.loads(Path(os.environ["FLOOR_ANSWERS"]).read_text()).items()
):
    method, path = route.split(" ", 1)
    app.add_url_rule(path, view_func=constant_view(f"route_{index}", answer), methods=[method])
