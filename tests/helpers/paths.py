"""Paths as a client may spell them: canonical paths, and the same rewritten by the tricks
an upstream reads otherwise than a proxy (case, ``;`` parameters, dot segments and ``..;``,
repeated slashes, percent-encoding, encoded and plain backslashes)."""

from __future__ import annotations

from hypothesis import strategies as st

SEGMENT = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=8)
CANONICAL = st.lists(
    st.sampled_from(["admin", "public", "api", "v1", "v2", "health"]) | SEGMENT,
    min_size=0,
    max_size=5,
).map(lambda segments: "/" + "/".join(segments))


@st.composite
def rewritten(draw, path: str) -> str:
    """Return ``path`` spelled otherwise by a few of the tricks, one after the other."""
    for _ in range(draw(st.integers(1, 4))):
        trick = draw(
            st.sampled_from(
                [
                    "case",
                    "parameter",
                    "dot",
                    "dotdot",
                    "dotdotsemi",
                    "slashes",
                    "encode",
                    "encode_slash",
                    "backslash",
                    "encoded_backslash",
                ]
            )
        )
        slashes = [index for index, character in enumerate(path) if character == "/"]
        at = draw(st.sampled_from(slashes)) if slashes else 0
        if trick == "case":
            letters = [index for index, character in enumerate(path) if character.isalpha()]
            if letters:
                index = draw(st.sampled_from(letters))
                path = path[:index] + path[index].upper() + path[index + 1 :]
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
        elif trick == "encode" and len(path) > 1:  # the first / starts every request target
            index = draw(st.integers(1, len(path) - 1))
            path = path[:index] + f"%{ord(path[index]):02X}" + path[index + 1 :]
        elif trick == "encode_slash" and slashes and at > 0:
            path = path[:at] + "%2f" + path[at + 1 :]
        elif trick == "backslash" and slashes and at > 0:
            path = path[:at] + "\\" + path[at + 1 :]
        elif trick == "encoded_backslash" and slashes and at > 0:
            path = path[:at] + "%5C" + path[at + 1 :]
    return path
