"""The service's OpenAPI 3.1 document, ``openapi.json`` beside this module, as an app serves it.

The file documents the service with every option on. ``openapi_json(app)`` serves it
from ``GET /openapi.json``, built once per app, on first use, with what the settings
change:

- the version is the package's;
- an object's ``x-without-<option>`` member is a JSON Merge Patch (RFC 7386) applied
  to that object when the option is off (``OPTION_OFF``), and dropped either way;
- the auth cookie's name and the configured identity providers are filled in;
- an operation is listed only if the app routes its path and method, and each GET
  comes with the HEAD that Flask adds to it (the same answers, headers only).
"""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import re
import tomllib
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import orjson
from flask import Flask

from app.config.settings import Settings
from app.extensions import OPENAPI_JSON

DISTRIBUTION = "token-service"
#: The checkout's project file, when the service runs from one.
SOURCE_PROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
#: The version of a copy of app/ with neither a checkout nor metadata (PEP 440).
UNKNOWN_VERSION = "0+unknown"
#: What each ``x-without-<option>`` patch of the file stands for: true when the option is off.
OPTION_OFF: dict[str, Callable[[Settings], bool]] = {
    "x-without-user-directory": lambda settings: not settings.users_file,
    "x-without-rate-limit": lambda settings: not settings.rate_limit_auth,
    "x-without-check-cookie": lambda settings: not settings.auth_check_cookie,
    # /login is limited per client address, and per username when a directory checks it
    "x-without-login-limit": lambda settings: (
        not settings.rate_limit_auth and not (settings.users_file and settings.login_failure_limit)
    ),
}
#: The operations whose first parameter is the identity provider's name.
PROVIDER_PATHS = ("/auth/{provider}/login", "/auth/{provider}/callback")


def openapi_json(app: Flask) -> bytes:
    """Return the app's OpenAPI document as JSON bytes, built on the first call only."""
    document: bytes | None = app.extensions.get(OPENAPI_JSON)
    if document is None:
        document = orjson.dumps(openapi_document(app))
        app.extensions[OPENAPI_JSON] = document
    return document


def openapi_document(app: Flask) -> dict[str, Any]:
    """Return the OpenAPI 3.1 document of the operations that ``app`` routes."""
    settings: Settings = app.config["SETTINGS"]
    document: dict[str, Any] = apply_options(orjson.loads(document_file()), settings)
    document["info"]["version"] = service_version()
    components = document["components"]
    cookie = settings.auth_cookie_name
    components["securitySchemes"]["cookieAuth"]["name"] = cookie
    components["headers"]["ClearAuthCookie"]["schema"]["pattern"] = f"^{re.escape(cookie)}=;"
    names = [provider.name for provider in settings.identity_providers]
    for path in PROVIDER_PATHS if names else ():
        parameter = document["paths"][path]["get"]["parameters"][0]
        parameter["description"] += f" Configured: {', '.join(names)}."
        parameter["example"] = names[0]
    document["paths"] = routed_paths(document["paths"], routes(app))
    return document


@cache
def document_file() -> bytes:
    """Return the document file as it ships in the package, read once per process."""
    return importlib.resources.files("app.openapi").joinpath("openapi.json").read_bytes()


@cache
def service_version(project: Path = SOURCE_PROJECT) -> str:
    """Return the service's version: its checkout's pyproject.toml, else the installed package's.

    Run from a checkout (as the tests and ``make run`` do), the package is not installed,
    and pyproject.toml holds what a build writes into the metadata; it also wins over an
    older copy of the service installed in the same environment.
    """
    if project.is_file():
        metadata = tomllib.loads(project.read_text(encoding="utf-8")).get("project", {})
        if metadata.get("name") == DISTRIBUTION:
            return str(metadata["version"])
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return UNKNOWN_VERSION


def apply_options(node: Any, settings: Settings) -> Any:
    """Return ``node`` with every ``x-without-<option>`` patch applied or dropped, depth first."""
    if isinstance(node, list):
        return [apply_options(item, settings) for item in node]
    if not isinstance(node, dict):
        return node
    patches = [(key, node[key]) for key in OPTION_OFF if key in node]
    node = {key: apply_options(value, settings) for key, value in node.items()}
    for key, patch in patches:
        del node[key]
        if OPTION_OFF[key](settings):
            node = merge_patch(node, patch)
    return node


def merge_patch(target: Any, patch: Any) -> Any:
    """Return ``target`` with the JSON Merge Patch ``patch`` applied (RFC 7386)."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


#: The methods an OpenAPI path item may document (OPTIONS aside: werkzeug answers it).
DOCUMENTED_METHODS = ("GET", "PUT", "POST", "DELETE", "HEAD", "PATCH", "TRACE")


def routes(app: Flask) -> set[tuple[str, str]]:
    """Return the (path template, lower-case method) pairs that ``app`` routes; a rule of
    no methods routes any (Envoy's prefix)."""
    return {
        (template(rule.rule), method.lower())
        for rule in app.url_map.iter_rules()
        if rule.endpoint != "static"
        for method in rule.methods or DOCUMENTED_METHODS
        if method != "OPTIONS"
    }


def template(path: str) -> str:
    """Return ``path`` with every variable, Flask's ``<...>`` or OpenAPI's ``{...}``, as ``{}``."""
    return re.sub(r"<[^>]*>|\{[^}]*\}", "{}", path)


def routed_paths(
    paths: dict[str, dict[str, Any]], routed: set[tuple[str, str]]
) -> dict[str, dict[str, Any]]:
    """Return the operations of ``paths`` that are routed, each GET followed by its HEAD."""
    kept: dict[str, dict[str, Any]] = {}
    for path, operations in paths.items():
        if "get" in operations:
            operations = {**operations, "head": head_of(operations["get"])}
        item = {
            method: operation
            for method, operation in operations.items()
            if (template(path), method) in routed
        }
        if item:
            kept[path] = item
    return kept


def head_of(get: dict[str, Any]) -> dict[str, Any]:
    """Return the HEAD of a GET operation: the same answers, headers only."""
    head: dict[str, Any] = orjson.loads(orjson.dumps(get))  # a deep copy
    head["operationId"] += "Head"
    head["summary"] += " (headers only)"
    return head
