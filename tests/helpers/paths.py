"""Paths as a client may spell them: canonical paths, and the same rewritten by the tricks
an upstream reads otherwise than a proxy (case, Unicode case folds, ``;`` parameters, dot
segments and ``..;``, repeated slashes and a leading ``//host``, trailing dots and spaces,
percent-encoding, encoded and plain backslashes), by those no reading settles (a raw
``#``, ``%u`` escapes, overlong UTF-8), and methods named by overrides."""

from __future__ import annotations

from urllib.parse import quote

from hypothesis import strategies as st

SEGMENT = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=8)
CANONICAL = st.lists(
    st.sampled_from(["admin", "public", "api", "v1", "v2", "health"]) | SEGMENT,
    min_size=0,
    max_size=5,
).map(lambda segments: "/" + "/".join(segments))
#: Characters beyond ASCII that Unicode case mapping turns into the ASCII letters given.
FOLDS = {
    "i": ["\u0131", "\u0130"],
    "s": ["\u017f"],
    "k": ["\u212a"],
    "j": ["\u01f0"],
    "h": ["\u1e96"],
    "t": ["\u1e97"],
    "ss": ["\u00df", "\u1e9e"],
    "fi": ["\ufb01"],
    "st": ["\ufb06"],
}
#: What a Windows server drops at the end of a segment.
TRAILERS = [".", "..", "%2e", "%2E", "%20", ".%20"]
#: Tricks no upstream reading settles: the path is denied.
UNREADABLE = frozenset({"fragment", "iis_u", "overlong"})


def rewritten(path: str, raw: bool = True) -> st.SearchStrategy[str]:
    """Return ``path`` spelled otherwise by a few of the tricks, one after the other;
    ``raw``: also with characters a test client cannot send (a raw space, ``#``, Unicode)."""
    return tricked(path, raw).map(lambda spelled: spelled[0])


@st.composite
def tricked(draw, path: str, raw: bool = True) -> tuple[str, frozenset[str]]:
    """Return ``path`` rewritten as ``rewritten`` does, and the tricks applied."""
    used = set()
    tricks = [
        "case",
        "fold",
        "parameter",
        "dot",
        "dotdot",
        "dotdotsemi",
        "slashes",
        "trailing",
        "encode",
        "encode_slash",
        "backslash",
        "encoded_backslash",
        "iis_u",
        "overlong",
    ]
    if raw:
        tricks += ["fragment", "raw_fold", "raw_space"]
    for _ in range(draw(st.integers(1, 4))):
        trick = draw(st.sampled_from(tricks))
        before = path
        slashes = [index for index, character in enumerate(path) if character == "/"]
        at = draw(st.sampled_from(slashes)) if slashes else 0
        # the end of each segment but those of dots only (a dot there makes a dot segment)
        ends = [end for end in [*slashes, len(path)] if path[:end].rsplit("/", 1)[-1].strip(".")]
        if trick == "case":
            letters = [
                index for index, char in enumerate(path) if char.isascii() and char.isalpha()
            ]
            if letters:
                index = draw(st.sampled_from(letters))
                path = path[:index] + path[index].upper() + path[index + 1 :]
        elif trick in {"fold", "raw_fold"}:
            found = [(letters, i) for letters in FOLDS for i in _finds(path, letters)]
            if found:
                letters, index = draw(st.sampled_from(found))
                folded = draw(st.sampled_from(FOLDS[letters]))
                spelled = folded if trick == "raw_fold" else quote(folded)
                path = path[:index] + spelled + path[index + len(letters) :]
        elif trick == "parameter" and slashes and at > 0:
            path = path[:at] + ";" + draw(SEGMENT) + path[at:]
        elif trick == "dot" and slashes:
            path = path[:at] + "/." + path[at:]
        elif trick == "dotdot" and slashes:
            path = path[:at] + "/" + draw(SEGMENT) + "/.." + path[at:]
        elif trick == "dotdotsemi" and slashes:
            path = path[:at] + "/" + draw(SEGMENT) + "/..;" + path[at:]
        elif trick == "slashes" and slashes:
            path = path[:at] + "/" + path[at:]
        elif trick in {"trailing", "raw_space"} and ends:
            end = draw(st.sampled_from(ends))
            trailer = " " if trick == "raw_space" else draw(st.sampled_from(TRAILERS))
            path = path[:end] + trailer + path[end:]
        elif trick == "encode" and len(path) > 1:  # the first / starts every request target
            index = draw(st.integers(1, len(path) - 1))
            character = path[index]
            if character == "#":  # %23 is a character of the path, no longer a fragment
                continue
            encoded = f"%{ord(character):02X}" if character.isascii() else quote(character)
            path = path[:index] + encoded + path[index + 1 :]
        elif trick == "encode_slash" and slashes and at > 0:
            path = path[:at] + "%2f" + path[at + 1 :]
        elif trick == "backslash" and slashes and at > 0:
            path = path[:at] + "\\" + path[at + 1 :]
        elif trick == "encoded_backslash" and slashes and at > 0:
            path = path[:at] + "%5C" + path[at + 1 :]
        elif trick == "fragment" and slashes:
            path = path[:at] + "#" + path[at:]
        elif trick == "iis_u" and len(path) > 1:
            index = draw(st.integers(1, len(path) - 1))
            path = path[:index] + f"%u{ord(path[index]):04x}" + path[index + 1 :]
        elif trick == "overlong" and slashes:  # ../ in two-byte overlong UTF-8
            path = path[:at] + "/" + draw(SEGMENT) + "/%C0%AE%C0%AE" + path[at:]
        if path != before:
            used.add(trick)
    if draw(st.integers(0, 4)) == 0:  # last: //host/path, a URL parser's host and path
        path = "//" + draw(SEGMENT) + path
        used.add("authority")
    return path, frozenset(used)


def _finds(text: str, letters: str) -> list[int]:
    return [index for index in range(len(text)) if text.startswith(letters, index)]


#: Headers of the original request by which a client names another method.
OVERRIDE_HEADERS = ["X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"]


@st.composite
def method_named(draw, method: str) -> tuple[str, dict[str, str], str]:
    """Return an original request's method, headers and query that name ``method`` to an
    upstream that honours a method override: in the method itself (any case), an override
    header, or a ``_method`` parameter of the query (its name or value encoded)."""
    how = draw(st.sampled_from(["itself", "header", "query"]))
    spelled = draw(st.sampled_from([method, method.lower(), method.capitalize()]))
    if how == "itself":
        return spelled, {}, ""
    carrier = draw(st.sampled_from(["POST", "GET"]))
    if how == "header":
        return carrier, {draw(st.sampled_from(OVERRIDE_HEADERS)): spelled}, ""
    key = draw(st.sampled_from(["_method", "%5Fmethod", "_%6Dethod"]))
    value = draw(st.sampled_from([spelled, quote(spelled[0], safe="") + spelled[1:]]))
    before = draw(st.sampled_from(["", "a=1&"]))
    return carrier, {}, f"?{before}{key}={value}"
