"""Where a login sends the browser back to: the URL it asked for, if its host is allowed.

The gateway's sign-in (docs/gateway.md) starts a login with the URL the browser asked
for. A login start is a link anyone can write, so that URL is never trusted: it is
taken only when it is a plain path on the service's host, or an ``http``/``https`` URL
whose host is in LOGIN_RETURN_DOMAINS. Anything a browser could read as another host
(``//evil``, ``/\\evil``, ``https:evil``, ``https://good@evil``, ``/%2f%2fevil``, a tab
or a newline, which browsers drop) is refused, and the login goes to
LOGIN_REDIRECT_URL instead.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

#: Longest return URL kept: it rides in the login-state cookie beside the login's data,
#: and three pending logins with one each must keep that cookie under a browser's 4 KB.
MAX_RETURN_URL_LENGTH = 512
#: Printable ASCII but the backslash, which browsers read as ``/`` in http(s) URLs.
PLAIN = re.compile(r"[!-\[\]-~]+")
#: A path on the service's own host: one slash, then no second slash or backslash.
OWN_PATH = re.compile(r"/(?![/\\])")
#: An absolute URL: scheme, host of letters, digits, dots and dashes, an optional port,
#: then the path, query or fragment. No userinfo, no percent sign in the host.
ABSOLUTE = re.compile(r"(?i:https?)://([A-Za-z0-9.-]+)(?::[0-9]{1,5})?(?=[/?#]|$)")
#: Rounds of percent-decoding looked through for a hidden slash or backslash.
DECODING_ROUNDS = 3
#: A dot segment, which would let a path climb to ``//`` once resolved.
DOT_SEGMENT = re.compile(r"(?:^|/)\.\.?(?:/|$)")


def checked_return_url(candidate: str | None, allowed: tuple[str, ...]) -> str | None:
    """Return ``candidate`` if a browser sent there stays on the service's host or lands on
    an allowed host (``app.example.com``, or any subdomain of ``.example.com``); else None."""
    if not candidate or len(candidate) > MAX_RETURN_URL_LENGTH or not PLAIN.fullmatch(candidate):
        return None
    if OWN_PATH.match(candidate):
        return candidate if _plain_when_decoded(candidate) else None
    match = ABSOLUTE.match(candidate)
    if match is None or not host_allowed(match.group(1).lower(), allowed):
        return None
    return candidate if _plain_when_decoded(candidate[match.end() :]) else None


def host_allowed(host: str, allowed: tuple[str, ...]) -> bool:
    """Return whether ``host`` (lowercase) is one of ``allowed`` or under a ``.domain`` of it."""
    return any(
        host.endswith(entry) and len(host) > len(entry) if entry.startswith(".") else host == entry
        for entry in allowed
    )


def _plain_when_decoded(rest: str) -> bool:
    """Return whether the path of ``rest`` (what follows the host, or a whole own path)
    still starts with one slash and holds no backslash or control character once decoded,
    so that no server that decodes it again reads another host into it."""
    path = re.split(r"[?#]", rest, maxsplit=1)[0]
    for _ in range(DECODING_ROUNDS):
        try:
            decoded = unquote(path, errors="strict") if "%" in path else path
        except UnicodeDecodeError:
            return False
        if (
            "\\" in decoded
            or not decoded.isprintable()
            or decoded.startswith("//")
            or DOT_SEGMENT.search(decoded)
        ):
            return False
        if decoded == path:
            return True
        path = decoded
    return False
