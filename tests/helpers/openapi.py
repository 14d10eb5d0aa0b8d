"""The OpenAPI document as the tests read it: fetched from the app, and real answers
checked against it."""

from __future__ import annotations

import re
from typing import Any

from flask import Flask, Response
from flask.testing import FlaskClient
from openapi_schema_validator import OAS31Validator


def document_of(client: FlaskClient) -> dict[str, Any]:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    return response.get_json()


def resolved(document: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """Follow a ``$ref`` to a component (one level, as the document uses them)."""
    reference = node.get("$ref")
    if reference is None:
        return node
    kind, name = reference.removeprefix("#/components/").split("/")
    return document["components"][kind][name]


def validator(document: dict[str, Any], schema: dict[str, Any]) -> OAS31Validator:
    """Return a validator of ``schema`` whose ``#/components/...`` references resolve."""
    return OAS31Validator({**schema, "components": document["components"]})


def assert_documented(
    document: dict[str, Any], method: str, path: str, response: Response
) -> dict[str, Any]:
    """Assert that a real answer is one the document lists: status, media type, body, headers."""
    operation = document["paths"][path][method]
    responses = operation["responses"]
    status = str(response.status_code)
    assert status in responses, f"{method.upper()} {path}: {status} is not documented"
    declared = resolved(document, responses[status])
    content = declared.get("content")
    if content is None:
        assert response.data == b""
        assert "Content-Type" not in response.headers
    else:
        assert response.content_type in content, (response.content_type, list(content))
        schema = content[response.content_type]["schema"]
        body = response.get_json() if response.is_json else response.get_data(as_text=True)
        if method != "head":  # the test client keeps a HEAD's body, which servers drop
            validator(document, schema).validate(body)
    for name, header in declared.get("headers", {}).items():
        header = resolved(document, header)
        value = response.headers.get(name)
        assert value is not None or not header.get("required"), f"{name} is missing"
        if value is not None:
            schema = header["schema"]
            validator(document, schema).validate(
                int(value) if schema.get("type") == "integer" else value
            )
    return declared


HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def variables_blanked(path: str) -> str:
    """Return a path with each variable, Flask's ``<...>`` or OpenAPI's ``{...}``, as ``{}``."""
    return re.sub(r"<[^>]*>|\{[^}]*\}", "{}", path)


def routed(app: Flask) -> set[tuple[str, str]]:
    """Return every path and method ``app`` routes, as ``documented`` names them; a rule of
    no methods routes every method (Envoy's prefix), of which OpenAPI names these."""
    return {
        (variables_blanked(rule.rule), method.lower())
        for rule in app.url_map.iter_rules()
        if rule.endpoint != "static"
        for method in rule.methods or HTTP_METHODS
        if method.upper() != "OPTIONS"  # PROVIDE_AUTOMATIC_OPTIONS is off: no route serves it
    }


def documented(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (variables_blanked(path), method)
        for path, item in document["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }
