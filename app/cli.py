"""``flask tokens ...``: operator commands on the refresh-token store."""

from __future__ import annotations

from flask import Flask


def register_commands(app: Flask) -> None:
    """Add the operator commands to ``app``'s CLI."""
