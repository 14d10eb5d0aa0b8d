"""The per-address rate limit as the tests drive it: requests from an address of their
own, and the limiter's storage failures counted and logged."""

from __future__ import annotations

#: An address that no default exempts (TEST-NET-3), as a proxy would forward it.
CLIENT = "203.0.113.7"


def from_address(address: str = CLIENT) -> dict:
    return {"environ_base": {"REMOTE_ADDR": address}}


def log_in(client, address: str = CLIENT, username: str = "alice"):
    return client.post("/login", json={"username": username}, **from_address(address))


def counted_failures(client) -> list[None]:
    """Point the limiter's failure hook (what a metrics counter would be) at a list."""
    counted: list[None] = []
    client.application.extensions["rate_limiter"].on_storage_failure = lambda: counted.append(None)
    return counted


def limiter_messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "app.limits.address"]
