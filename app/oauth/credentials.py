"""Client authentication (RFC 6749, section 2.3.1): ``client_secret_basic`` or
``client_secret_post``, never both."""

from __future__ import annotations

import base64
import binascii
from typing import Any
from urllib.parse import unquote_plus

from app.oauth.errors import invalid_client, invalid_request

#: The methods the token, introspection and revocation endpoints accept.
AUTH_METHODS = ("client_secret_basic", "client_secret_post")
#: A public client only names itself (``client_id``, no secret): at the token endpoint's
#: password and refresh grants, and at revocation, where it is the token's holder.
PUBLIC_CLIENT = "none"
#: A longer Authorization value is no client's credentials.
MAX_BASIC_LENGTH = 1024


def basic_credentials(header: str) -> tuple[str, str] | None:
    """Return the client id and secret of an ``Authorization: Basic`` value, or None when
    the value is another scheme; raise ``invalid_client`` when it is a broken Basic one.

    Each part is form-urlencoded before it is joined by ``:`` and base64-encoded (RFC 6749,
    section 2.3.1), so each is decoded after the split.
    """
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    if len(header) > MAX_BASIC_LENGTH:
        raise invalid_client("the Authorization header is too long")
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):  # UnicodeDecodeError is a ValueError
        raise invalid_client("the Basic credentials are not base64 of UTF-8") from None
    client_id, colon, secret = decoded.partition(":")
    if not colon:
        raise invalid_client("the Basic credentials have no ':'")
    try:
        return unquote_plus(client_id, errors="strict"), unquote_plus(secret, errors="strict")
    except UnicodeDecodeError:
        raise invalid_client("the Basic credentials are not UTF-8 once decoded") from None


def presented_credentials(
    header: str | None, fields: dict[str, Any]
) -> tuple[str, str, str] | None:
    """Return the client id, secret and method the request authenticates with, or None
    when it names no client; ``invalid_request`` for two methods at once."""
    basic = None if header is None else basic_credentials(header)
    in_body = "client_id" in fields or "client_secret" in fields
    if basic is not None:
        if in_body and "client_secret" in fields:
            raise invalid_request("use one client authentication method, not two")
        if fields.get("client_id", basic[0]) != basic[0]:
            raise invalid_request("client_id is not the client of the Basic credentials")
        return basic[0], basic[1], "client_secret_basic"
    if header is not None and header.partition(" ")[0].lower() not in {"basic", ""}:
        raise invalid_client("clients authenticate with HTTP Basic or in the form body")
    if not in_body:
        return None
    client_id, secret = fields.get("client_id"), fields.get("client_secret")
    if not isinstance(client_id, str) or not client_id:
        raise invalid_request("client_id is required with client_secret")
    if secret is None:
        return client_id, "", PUBLIC_CLIENT  # a public client names itself: no authentication
    if not isinstance(secret, str):
        raise invalid_request("client_secret must be a string")
    return client_id, secret, "client_secret_post"
