"""The rule every username follows, at login, in a token and in the settings."""

from __future__ import annotations

import re

#: Longest username accepted at login and in a token, in characters.
MAX_USERNAME_LENGTH = 256
#: The start of a registered client's username in its tokens (``client:<id>``), which no
#: login may take while CLIENTS_FILE is set.
CLIENT_USERNAME_PREFIX = "client:"
#: Characters no username may hold, as it travels into claims, log lines and HTTP headers:
#: C0 and C1 controls and DEL (NUL, CR, LF...), the Unicode line and paragraph separators,
#: and the bidirectional embeddings, overrides and isolates, which reorder how a log line
#: reads. Other format characters and every letter, space and emoji are allowed.
UNSAFE_USERNAME_RANGES = r"\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069"
UNSAFE_USERNAME_CHARACTERS = re.compile(f"[{UNSAFE_USERNAME_RANGES}]")
#: Names a URL path segment cannot carry: every client resolves them as dot segments
#: (``/admin/users/../sessions`` is ``/admin/sessions``), so no session API could reach them.
DOT_SEGMENTS = frozenset({".", ".."})
#: Whitespace as ECMA-262's ``\s`` reads it, spelled out: Python's ``\s`` lacks U+FEFF and
#: adds controls (refused anyway), so a validator of the API document and the service
#: read one class. A name of these alone is no name.
WHITESPACE_RANGES = r"\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
WHITESPACE = re.compile(f"[{WHITESPACE_RANGES}]*")
#: The rule as a JSON Schema pattern (ECMA-262, which Python's re reads alike, every class
#: spelled out): none of those characters, one at least that is not whitespace, and no dot
#: segment.
USERNAME_PATTERN = (
    f"^(?!\\.\\.?$)[^{UNSAFE_USERNAME_RANGES}]*[^{WHITESPACE_RANGES}{UNSAFE_USERNAME_RANGES}]"
    f"[^{UNSAFE_USERNAME_RANGES}]*$"
)
#: Why the separators and the bidirectional controls are refused; the rest are controls.
_UNSAFE_USERNAME_REASONS = (
    ("\u2028\u2029", "must not contain line or paragraph separators"),
    (
        "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069",
        "must not contain bidirectional text controls",
    ),
)


#: A lone surrogate (JSON's \u escapes can spell one), which no UTF-8 file holds.
SURROGATE = re.compile("[\ud800-\udfff]")


def username_problem(name: str) -> str | None:
    """Return why ``name`` cannot be a user of the directory (USERS_FILE), or None if it can."""
    if not 1 <= len(name) <= MAX_USERNAME_LENGTH:
        return f"a username is 1 to {MAX_USERNAME_LENGTH} characters"
    if SURROGATE.search(name):
        return "a username has no lone surrogates"
    problem = token_username_problem(name)  # a name no login could ever use
    return None if problem is None else f"a username {problem}"


def token_username_problem(username: str) -> str | None:
    """Return why ``username`` may not be signed into a token (``must not ...``), or None."""
    unsafe = UNSAFE_USERNAME_CHARACTERS.search(username)
    if unsafe is not None:
        found = unsafe.group()
        for characters, reason in _UNSAFE_USERNAME_REASONS:
            if found in characters:
                return reason
        return "must not contain control characters"
    if WHITESPACE.fullmatch(username):
        return "must not be only whitespace"
    if username in DOT_SEGMENTS:
        return "must not be . or .. (no URL path can name it)"
    return None
