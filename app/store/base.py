"""The refresh-token store interface that every backend implements."""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass

#: How many hex characters of a digest are shown to operators.
DIGEST_PREFIX_LENGTH = 12
HEX_DIGITS = frozenset("0123456789abcdef")


class StoreUnavailableError(Exception):
    """The store cannot be reached or did not answer in time."""


@dataclass(frozen=True)
class TokenRecord:
    """What an operator may see of a stored refresh token: never the token itself."""

    digest_prefix: str
    username: str
    issued_at: int

    @classmethod
    def of(cls, digest: str, username: str, issued_at: int) -> TokenRecord:
        """Return the record of a stored digest, showing only its first hex digits."""
        return cls(digest[:DIGEST_PREFIX_LENGTH], username, issued_at)


def token_digest(token: str) -> str:
    """Return the SHA-256 hex digest under which a refresh token is stored."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def shown_digest(token: str) -> str:
    """Return the start of a token's digest: what logs and operators see of a token."""
    return token_digest(token)[:DIGEST_PREFIX_LENGTH]


class RefreshTokenStore(ABC):
    """Refresh tokens by digest, each recorded with the username it was issued to.

    Every method is atomic on its own and safe to call from any process or
    thread. A backend raises StoreUnavailableError, and nothing else, when it
    cannot answer.
    """

    @abstractmethod
    def issue(self, token: str, username: str) -> None:
        """Record a newly issued refresh token for ``username``."""

    @abstractmethod
    def owner_of(self, token: str) -> str | None:
        """Return the username the refresh token was issued to, or None."""

    @abstractmethod
    def revoke(self, token: str) -> bool:
        """Forget the refresh token; return whether it was known."""

    @abstractmethod
    def tokens_of(self, username: str) -> list[TokenRecord]:
        """Return the records of every refresh token of ``username``, oldest first."""

    @abstractmethod
    def revoke_all(self, username: str) -> int:
        """Forget every refresh token of ``username``; return how many there were."""

    def revoke_digest(self, digest_prefix: str) -> int:
        """Forget the one token whose digest starts with ``digest_prefix``; return 1 or 0."""
        prefix = digest_prefix.lower()
        if not 0 < len(prefix) <= 64 or not set(prefix) <= HEX_DIGITS:
            return 0  # no digest starts so
        return self._revoke_digest(prefix)

    @abstractmethod
    def _revoke_digest(self, prefix: str) -> int:
        """Do ``revoke_digest`` for a prefix of 1 to 64 lowercase hex digits."""

    @abstractmethod
    def count(self) -> int:
        """Return how many refresh tokens are stored."""

    @abstractmethod
    def ping(self) -> None:
        """Return if the store answers, else raise StoreUnavailableError."""

    @abstractmethod
    def close(self) -> None:
        """Release this process's connections (they are reopened on next use)."""
