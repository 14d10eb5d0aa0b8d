"""A gunicorn logger whose access log never shows a credential."""

from __future__ import annotations

import re
from typing import Any

from gunicorn.glogging import Logger

#: The refresh token in ``DELETE /token/<refreshToken>``, wherever a path appears.
TOKEN_IN_PATH = re.compile(r"(/token/)[^\s?#\"]+")
#: Request headers that carry credentials, as gunicorn names their atoms.
SECRET_HEADER_ATOMS = ("{authorization}i", "{cookie}i", "{proxy-authorization}i")
REDACTED = "<redacted>"


def redact(text: str) -> str:
    """Return ``text`` with any refresh token in a ``/token/...`` path replaced."""
    return TOKEN_IN_PATH.sub(r"\1" + REDACTED, text)


class RedactingLogger(Logger):
    """Gunicorn's logger, minus refresh tokens in paths and credentials in headers."""

    def atoms(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> dict:
        atoms = super().atoms(resp, req, environ, request_time)
        for key, value in atoms.items():
            if isinstance(value, str) and "/token/" in value:
                atoms[key] = redact(value)
        for key in SECRET_HEADER_ATOMS:
            if key in atoms:
                atoms[key] = REDACTED
        return atoms
