"""``GET /.well-known/jwks.json``: the public keys that verify this service's tokens.

Published only when tokens are signed with a private key (EdDSA or ES256); with
HS256 the key is a secret, and the path is a 404 like any unknown one.
"""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request
from werkzeug.exceptions import NotFound

from app.extensions import current_settings, get_key_ring

bp = Blueprint("jwks", __name__)

#: How long verifiers may cache the key set, in seconds; never longer than a rotation
#: window (ACCESS_TOKEN_LIFETIME + COOKIE_TOKEN_LIFETIME), after which a key is dropped.
JWKS_MAX_AGE = 300


@bp.get("/.well-known/jwks.json")
def jwks() -> Response:
    """Answer the current and previous public keys, each with kid, alg and use."""
    settings = current_settings()
    published = get_key_ring().jwks
    if published is None:
        raise NotFound()
    response = jsonify(published)
    response.cache_control.public = True
    response.cache_control.max_age = min(
        JWKS_MAX_AGE, settings.access_token_lifetime + settings.cookie_token_lifetime
    )
    response.add_etag()
    response.make_conditional(request)  # 304 when the client's ETag matches
    return response
