"""``GET /.well-known/oauth-authorization-server``: the server's metadata (RFC 8414).

Registered only with TOKEN_ISSUER: without it the path is a 404 like any unknown one. An
issuer with a path has the document at RFC 8414's path for it as well.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from flask import Blueprint, Response, jsonify

from app.extensions import current_settings, get_key_ring
from app.oauth.metadata import METADATA_PATH, server_metadata

if TYPE_CHECKING:
    from flask.blueprints import BlueprintSetupState

bp = Blueprint("server_metadata", __name__)

#: How long clients may cache the document, in seconds: it changes only with the settings.
METADATA_MAX_AGE = 300


@bp.record_once
def route_issuer_path(state: BlueprintSetupState) -> None:
    """Serve the document at RFC 8414's path for an issuer with a path too (section 3.1:
    ``https://host/auth`` has it at ``/.well-known/oauth-authorization-server/auth``), where
    a client that derives the address from the issuer looks; a proxy in front routes it."""
    issuer_path = urlsplit(str(state.app.config["SETTINGS"].token_issuer)).path.rstrip("/")
    if issuer_path:
        state.app.add_url_rule(
            METADATA_PATH + issuer_path, f"{state.name}.{metadata.__name__}", methods=["GET"]
        )


@bp.get(METADATA_PATH)
def metadata() -> Response:
    """Answer the metadata document, built from the settings alone.

    The endpoints are under PUBLIC_URL, else under TOKEN_ISSUER, never under the request's
    Host: a document a cache keeps must not send clients and their secrets elsewhere.
    """
    settings = current_settings()
    ring = get_key_ring()
    base_url = (settings.public_url or str(settings.token_issuer)).rstrip("/")
    algorithms = sorted({key.algorithm for key in ring.keys})
    response = jsonify(server_metadata(settings, base_url, algorithms, ring.jwks is not None))
    response.cache_control.public = True
    response.cache_control.max_age = METADATA_MAX_AGE
    return response
