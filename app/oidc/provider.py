"""One OpenID Connect provider as the login talks to it: discovery, tokens, userinfo.

Authlib does the protocol. This module decides what of the provider's answers
it may see: only a discovery document that passed the checks is kept, and of
it only the fields the login uses.
"""

from __future__ import annotations

import time
from typing import Any

import requests
from authlib.integrations.flask_client import FlaskIntegration, FlaskOAuth2App
from flask import current_app
from werkzeug.exceptions import BadGateway

from app.config.settings import IdentityProvider

#: How long the provider may take to answer one request, in seconds.
PROVIDER_TIMEOUT = 10
#: ID token signatures accepted: asymmetric only. Never "none", nor an HMAC keyed with
#: the client secret, whatever the provider's discovery document offers.
ID_TOKEN_ALGORITHMS = (
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA",
)  # fmt: skip
#: Fields a discovery document must have for the code flow to work at all.
REQUIRED_METADATA = ("issuer", "authorization_endpoint", "token_endpoint", "jwks_uri")
#: Fields kept when present. Nothing else is: Authlib hands the document to its HTTP
#: session as keyword arguments, where ``verify``, ``proxies``, ``client_id`` or
#: ``code_challenge_method`` would turn off TLS checks, PKCE or the login itself.
OPTIONAL_METADATA = ("userinfo_endpoint",)


class ProviderClient(FlaskOAuth2App):
    """Authlib's Flask client of one provider, which keeps only a checked discovery document."""

    def __init__(self, provider: IdentityProvider) -> None:
        super().__init__(
            FlaskIntegration(provider.name),
            provider.name,
            client_id=provider.client_id,
            client_secret=provider.client_secret,
            server_metadata_url=provider.discovery_url,
            client_kwargs={
                "scope": provider.scopes,
                "code_challenge_method": "S256",
                "default_timeout": PROVIDER_TIMEOUT,
            },
        )
        self.issuer = provider.issuer
        self.discovery_url = provider.discovery_url
        self.identity_provider = provider

    def load_server_metadata(self) -> dict[str, Any]:
        """Return the checked discovery document, fetched on first use; 502 if unusable.

        A document that fails the checks is not kept: the next login fetches it again.
        """
        if "_loaded_at" not in self.server_metadata:
            document = self._fetch_discovery()
            self.server_metadata.update(self._checked(document), _loaded_at=time.time())
        metadata: dict[str, Any] = self.server_metadata
        return metadata

    def userinfo_claims(self, access_token: str) -> dict[str, Any]:
        """Return the claims the userinfo endpoint gives for ``access_token``; 502 if it fails."""
        endpoint = self.load_server_metadata().get("userinfo_endpoint")
        if endpoint is None:
            current_app.logger.warning("identity provider %s: no userinfo_endpoint", self.name)
            raise BadGateway("identity provider has no userinfo endpoint")
        try:
            response = requests.get(
                endpoint,
                headers={"Authorization": f"Bearer {access_token}", "Accept": "application/json"},
                timeout=PROVIDER_TIMEOUT,
                allow_redirects=False,  # the access token goes to the userinfo endpoint only
            )
        except requests.RequestException as error:  # refused, reset, timed out
            raise provider_unreachable(self.name, error) from None
        claims = _json(response) if response.status_code == 200 else None
        if not isinstance(claims, dict):
            current_app.logger.warning(
                "identity provider %s: unusable userinfo response (HTTP %s, %s)",
                self.name,
                response.status_code,
                response.headers.get("Content-Type"),
            )
            raise BadGateway("identity provider sent an unusable userinfo response")
        return claims

    def _fetch_discovery(self) -> Any:
        try:
            response = requests.get(
                self.discovery_url, headers={"Accept": "application/json"}, timeout=PROVIDER_TIMEOUT
            )
            response.raise_for_status()
            return response.json()
        except requests.RequestException as error:  # refused, timed out, HTTP error, not JSON
            raise provider_unreachable(self.name, error) from None

    def _checked(self, document: Any) -> dict[str, Any]:
        """Return the fields of ``document`` the login uses, or raise 502 if it is unusable."""
        document = document if isinstance(document, dict) else {}
        missing = [name for name in REQUIRED_METADATA if not isinstance(document.get(name), str)]
        if missing or document["issuer"].rstrip("/") != self.issuer:
            current_app.logger.warning(
                "identity provider %s: discovery document unusable (missing %s, issuer %r)",
                self.name,
                missing,
                document.get("issuer"),
            )
            raise BadGateway("identity provider sent an unusable discovery document")
        checked = {name: document[name] for name in REQUIRED_METADATA}
        checked.update(
            (name, document[name])
            for name in OPTIONAL_METADATA
            if isinstance(document.get(name), str)
        )
        offered = document.get("id_token_signing_alg_values_supported")
        offered = offered if isinstance(offered, list) else ["RS256"]
        # Authlib verifies the ID token with the algorithms listed here: asymmetric only.
        checked["id_token_signing_alg_values_supported"] = [
            algorithm for algorithm in offered if algorithm in ID_TOKEN_ALGORITHMS
        ] or ["RS256"]
        return checked


def _json(response: requests.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def provider_unreachable(provider: str, error: Exception) -> BadGateway:
    """Log why ``provider`` could not be used and return the 502 to raise."""
    current_app.logger.warning("identity provider %s unreachable: %r", provider, error)
    return BadGateway("identity provider did not answer")
