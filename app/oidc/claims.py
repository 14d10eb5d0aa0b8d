"""What a provider's claims grant its user here: a role, and an email the gateway may pass.

A third-party user is ``user``, unless the provider's settings name them an admin: by a
value of their ``groups`` claim (OIDC_<NAME>_ADMIN_GROUPS), their ``sub``
(``_ADMIN_SUBJECTS``) or their verified email (``_ADMIN_EMAILS``). An email counts only
with ``email_verified`` true, from the same answer as the email itself: anyone may type
any address into their profile at many providers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.config.settings import IdentityProvider

#: Longest email taken into the cookie token (RFC 5321's longest path, 256, less <>).
MAX_EMAIL_LENGTH = 254
#: The claim whose values OIDC_<NAME>_ADMIN_GROUPS names.
GROUPS_CLAIM = "groups"


def verified_email(claims: Mapping[str, Any]) -> str | None:
    """Return the ``email`` of ``claims`` if they also say ``email_verified: true``, or None."""
    email = claims.get("email")
    if claims.get("email_verified") is not True or not isinstance(email, str):
        return None
    if not 0 < len(email) <= MAX_EMAIL_LENGTH or not email.isprintable():
        return None
    return email


def third_party_role(
    provider: IdentityProvider, subject: str, groups: Any, email: str | None
) -> str:
    """Return ``admin`` if the provider's settings name this user an admin, else ``user``.

    ``groups`` is the ``groups`` claim as the provider sent it; a value that is no list
    of strings grants nothing. ``email`` is a verified one, or None.
    """
    if subject in provider.admin_subjects:
        return "admin"
    if email is not None and email.lower() in provider.admin_emails:
        return "admin"
    if isinstance(groups, list) and any(
        isinstance(group, str) and group in provider.admin_groups for group in groups
    ):
        return "admin"
    return "user"
