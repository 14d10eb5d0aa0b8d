"""JSON texts read strictly: a member name given twice in one object is refused.

JSON parsers keep the last of duplicate names silently; which value was meant is
anyone's guess, so request bodies and token segments alike refuse them (RFC 8725,
section 3.11, for tokens).
"""

from __future__ import annotations

import json
import re
from typing import Any

#: The end of a JSON object's key: its closing quote, optional whitespace, the colon.
KEY_END = re.compile(rb'"[ \t\n\r]*:')
#: Characters of a duplicate key quoted back in an error message.
MAX_SHOWN_KEY = 64


class DuplicateKeyError(ValueError):
    """A JSON object names one key twice: which value was meant is anyone's guess."""

    def __init__(self, key: str) -> None:
        super().__init__(f"duplicate key: {key}")
        self.key = key


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """Return an object's members as a dict (``json.loads``'s object_pairs_hook), or raise
    DuplicateKeyError."""
    members = dict(pairs)
    if len(members) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key[:MAX_SHOWN_KEY])
            seen.add(key)
    return members


def count_keys(document: Any) -> int:
    """Return the number of keys of every object in ``document``, walked without recursion."""
    count, pending = 0, [document]
    while pending:
        value = pending.pop()
        if type(value) is dict:
            count += len(value)
            pending.extend(value.values())
        elif type(value) is list:
            pending.extend(value)
    return count


def may_repeat_a_key(text: bytes, document: Any) -> bool:
    """Return False when ``document``, parsed from the UTF-8 ``text``, surely has no key twice.

    Each key of a JSON text ends in one quote and a colon; other text may add such
    pairs (an escaped quote in a string) but none goes missing: as many pairs as
    keys parsed means no key came twice. True only says to parse again strictly.
    """
    # one brace in the text: the document (an object) is its only object, no walk
    keys = len(document) if text.count(b"{") == 1 else count_keys(document)
    quoted = text.count(b'":')
    if quoted == keys and quoted == text.count(b":"):
        # every colon follows a quote, so every key end is one of these (a third of the
        # regular expression's time): no more key ends than keys
        return False
    return len(KEY_END.findall(text)) != keys


def repeats_a_key(text: bytes | str) -> bool:
    """Return whether the JSON ``text`` names a key twice in one object (strict parse)."""
    try:
        json.loads(text, object_pairs_hook=unique_keys)
    except DuplicateKeyError:
        return True
    except (ValueError, RecursionError):
        return False  # not JSON: its parser says so elsewhere
    return False
