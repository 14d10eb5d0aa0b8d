"""Operator commands: ``flask tokens ...`` on the refresh-token store, for every backend,
``flask keys ...`` on the signing keys, ``flask users ...`` on the user directory, and
``flask sessions ...`` on a user's sessions.

Tokens are shown by the first hex digits of their SHA-256 digest and their issue
time, never in clear: the store does not hold them in clear either. Keys are shown
by their kid, never a secret or a private key. Passwords are read from standard input
or a hidden prompt, never from the command line, and never shown. ``flask clients ...``
registers OAuth clients; a client's secret is printed once, when it is made, and stored
as a digest. ``flask rules check`` tries the gateway's access rules on a request.
"""

from __future__ import annotations

from flask import Flask

from app.cli.clients import clients
from app.cli.keys import keys
from app.cli.rules import rules
from app.cli.sessions import sessions
from app.cli.tokens import tokens
from app.cli.users import users

__all__ = ["register_commands"]


def register_commands(app: Flask) -> None:
    """Add the operator commands to ``app``'s CLI."""
    app.cli.add_command(tokens)
    app.cli.add_command(keys)
    app.cli.add_command(users)
    app.cli.add_command(clients)
    app.cli.add_command(sessions)
    app.cli.add_command(rules)
