"""Registered OAuth clients for the tests: a clients' file with known secrets."""

from __future__ import annotations

import base64
from pathlib import Path

from app.oauth.clients import Client, change_clients, new_client_secret, secret_digest

ISSUER = "https://auth.example.com"
AUDIENCE = "https://api.example.com"


def register(path: Path, client_id: str, role: str = "user", audiences=()) -> str:
    """Register ``client_id`` in the clients' file at ``path``; return its secret."""
    secret = new_client_secret()

    def add(clients: dict[str, Client]) -> bool:
        clients[client_id] = Client(client_id, secret_digest(secret), role, tuple(audiences))
        return True

    change_clients(str(path), add)
    return secret


def basic(client_id: str, secret: str) -> dict[str, str]:
    """Return the Authorization header of ``client_secret_basic`` (RFC 6749, 2.3.1)."""
    encoded = base64.b64encode(f"{client_id}:{secret}".encode()).decode()
    return {"Authorization": f"Basic {encoded}"}
