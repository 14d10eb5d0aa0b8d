"""``GET /.well-known/oauth-authorization-server``: the server's metadata (RFC 8414).

Registered only with TOKEN_ISSUER: without it the path is a 404 like any unknown one.
"""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from app.extensions import current_settings, get_key_ring
from app.oauth.metadata import METADATA_PATH, server_metadata

bp = Blueprint("server_metadata", __name__)

#: How long clients may cache the document, in seconds: it changes only with the settings.
METADATA_MAX_AGE = 300


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
