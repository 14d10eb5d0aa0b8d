"""The authorization server's metadata (RFC 8414), built from the settings."""

from __future__ import annotations

from typing import Any

from app.config.settings import Settings
from app.oauth.credentials import AUTH_METHODS, PUBLIC_CLIENT

#: The grants ``POST /oauth/token`` serves.
GRANT_TYPES = ("client_credentials", "password", "refresh_token")
#: Where the metadata is, under the service's base URL.
METADATA_PATH = "/.well-known/oauth-authorization-server"


def server_metadata(
    settings: Settings, base_url: str, algorithms: list[str], jwks: bool
) -> dict[str, Any]:
    """Return the metadata document: ``issuer`` is TOKEN_ISSUER; the endpoints are under
    ``base_url`` (PUBLIC_URL, else TOKEN_ISSUER); the key set only when one is published;
    the OAuth endpoints only with CLIENTS_FILE, where they are served."""
    document: dict[str, Any] = {"issuer": settings.token_issuer}
    if jwks:
        document["jwks_uri"] = f"{base_url}/.well-known/jwks.json"
    if settings.clients_file is not None:
        methods = list(AUTH_METHODS)
        document.update(
            token_endpoint=f"{base_url}/oauth/token",
            introspection_endpoint=f"{base_url}/oauth/introspect",
            revocation_endpoint=f"{base_url}/oauth/revoke",
            grant_types_supported=list(GRANT_TYPES),
            token_endpoint_auth_methods_supported=[*methods, PUBLIC_CLIENT],
            introspection_endpoint_auth_methods_supported=methods,
            revocation_endpoint_auth_methods_supported=[*methods, PUBLIC_CLIENT],
        )
    else:  # no grant is served: say so, since an absent member means RFC 8414's default
        document["grant_types_supported"] = []
    # No authorization endpoint: no response type is served (RFC 8414 requires the member).
    document["response_types_supported"] = []
    # Not an RFC 8414 member: what a verifier of the access tokens must accept, and only that.
    document["access_token_signing_alg_values_supported"] = algorithms
    return document
