"""A gunicorn logger whose access and error logs never show a credential."""

from __future__ import annotations

import logging
import re
from typing import Any

from gunicorn.glogging import Logger

REDACTED = "<redacted>"
#: ``/token/<refreshToken>`` however the client spells the path, percent-escapes included.
TOKEN_IN_PATH = re.compile(
    r"(/(?:t|%[57]4)(?:o|%[46]f)(?:k|%[46]b)(?:e|%[46]5)(?:n|%[46]e)(?:/|%2f))[^\s?#\"]*", re.I
)
#: A JWT (access or cookie token), wherever it appears: a query string, a referer.
JWT = re.compile(r"eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*")
#: OAuth values in a query string: the authorization code is a credential for a minute.
OAUTH_PARAMETER = re.compile(r"([?&](?:code|state|access_token|refresh_token|id_token)=)[^&\s\"]*")
#: Anything shaped like a refresh token: 42 letters and digits standing alone.
REFRESH_TOKEN = re.compile(r"(?<![A-Za-z0-9])[A-Za-z0-9]{42}(?![A-Za-z0-9])")
#: Request headers that carry credentials, as gunicorn names their atoms.
SECRET_HEADER_ATOMS = ("{authorization}i", "{cookie}i", "{proxy-authorization}i")
FORMAT_ATOM = re.compile(r"%\(([^)]+)\)")


def redact(text: str) -> str:
    """Return ``text`` with refresh tokens, JWTs and OAuth codes replaced by ``<redacted>``."""
    text = TOKEN_IN_PATH.sub(r"\1" + REDACTED, text)
    text = OAUTH_PARAMETER.sub(r"\1" + REDACTED, text)
    text = JWT.sub(REDACTED, text)
    return REFRESH_TOKEN.sub(REDACTED, text)


class RedactingFilter(logging.Filter):
    """Redact credentials from any record, e.g. gunicorn's 'Invalid request' warnings."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


class RedactingLogger(Logger):
    """Gunicorn's logger, minus refresh tokens, JWTs and credential headers."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        self.error_log.addFilter(RedactingFilter())
        # only the atoms the access-log format shows are worth the redaction work
        self._shown_atoms = set(FORMAT_ATOM.findall(cfg.access_log_format))

    def atoms(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> dict:
        atoms = super().atoms(resp, req, environ, request_time)
        for key in self._shown_atoms & atoms.keys():
            if isinstance(atoms[key], str):
                atoms[key] = redact(atoms[key])
        for key in SECRET_HEADER_ATOMS:
            if key in atoms:
                atoms[key] = REDACTED
        return atoms
