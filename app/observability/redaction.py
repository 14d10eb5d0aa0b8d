"""What no log line may show: refresh tokens, JWTs and OAuth codes, however spelled."""

from __future__ import annotations

import re

REDACTED = "<redacted>"
#: ``/token/<refreshToken>`` however the client spells the path, percent-escapes included.
TOKEN_IN_PATH = re.compile(
    r"(/(?:t|%[57]4)(?:o|%[46]f)(?:k|%[46]b)(?:e|%[46]5)(?:n|%[46]e)(?:/|%2f))[^\s?#\"]*", re.I
)
#: A JWT (access or cookie token), wherever it appears: a query string, a referer.
JWT = re.compile(r"eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*")
#: OAuth values in a query string, its first parameter too (a query quoted without its
#: ``?``): the authorization code is a credential for a minute.
OAUTH_PARAMETER = re.compile(
    r"((?<![A-Za-z0-9_.-])(?:code|state|access_token|refresh_token|id_token)=)[^&\s\"']*"
)
#: Anything shaped like a refresh token: 42 letters and digits standing alone.
REFRESH_TOKEN = re.compile(r"(?<![A-Za-z0-9])[A-Za-z0-9]{42}(?![A-Za-z0-9])")


def redact(text: str) -> str:
    """Return ``text`` with refresh tokens, JWTs and OAuth codes replaced by ``<redacted>``."""
    text = TOKEN_IN_PATH.sub(r"\1" + REDACTED, text)
    text = OAUTH_PARAMETER.sub(r"\1" + REDACTED, text)
    text = JWT.sub(REDACTED, text)
    return REFRESH_TOKEN.sub(REDACTED, text)
