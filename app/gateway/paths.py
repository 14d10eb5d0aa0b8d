"""How an upstream could read a request's path and host.

A proxy asks about the path as the client sent it. Upstreams differ in what they make
of it: some decode percent-encoding once, or again; some take a backslash or an encoded
slash for a separator; Java servers drop ``;`` parameters (``/x/..;/admin`` is
``/admin`` there); most resolve dot segments and merge repeated slashes; some ignore
case. ``path_readings`` returns every path those readings give, so that the judging can
take the strictest verdict among them: no spelling of a path moves it to a laxer rule
than the one its canonical form matches.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

#: Decodings of a twice- or thrice-encoded path an upstream might still make; a path that
#: still changes after these is refused (no upstream decodes so often).
MAX_DECODINGS = 3
#: Longest path read (nginx's default header buffer is 8 KiB): a longer one is denied, so
#: that no request makes the readings cost more than a few of them.
MAX_PATH_LENGTH = 8192
#: Longest path holding one of the tricks read: each is read some dozens of ways, and a
#: longer one is denied.
MAX_TRICKY_PATH_LENGTH = 2048
#: What the fast path needs absent: the path then reads only as itself (and lowercased).
TRICKS = re.compile(r"[%\\;\x00-\x1f\x7f]|//|/\.")
PARAMETERS = re.compile(r";[^/]*")
ENCODED_SEPARATOR = re.compile(r"(%2[fF]|%5[cC])")
SLASHES = re.compile(r"/{2,}")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: A host name, or an IP address, as a rule may name it (with ``*.`` before a domain).
HOST_PATTERN = re.compile(r"(\*\.)?[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?|\[[0-9a-f:.]+\]")


def request_target_path(uri: str) -> str | None:
    """Return the path of a request target (origin or absolute form), or None if it has none."""
    target = uri.split("#", 1)[0].split("?", 1)[0]
    if target.startswith("/"):
        return target
    scheme, separator, rest = target.partition("://")
    if separator and scheme.lower() in {"http", "https"}:
        slash = rest.find("/")
        return "/" if slash < 0 else rest[slash:]
    return None


def path_readings(uri: str) -> frozenset[str] | None:
    """Return every path an upstream could read in ``uri``, lowercased ones included, or
    None when it is no path or reads as one holding a control character."""
    path = request_target_path(uri)
    if path is None or len(path) > MAX_PATH_LENGTH:
        return None
    if TRICKS.search(path) is None:
        return frozenset((path, path.lower()))
    if len(path) > MAX_TRICKY_PATH_LENGTH:
        return None
    spellings: set[str] = set()
    for before in {path, PARAMETERS.sub("", path)}:
        decodings = _decodings(before)
        if decodings is None:
            return None
        for decoded in set(decodings):
            for separated in {decoded, decoded.replace("\\", "/")}:
                spellings.update((separated, PARAMETERS.sub("", separated)))
    readings = {path}
    for spelling in spellings:
        readings.update(normalized(spelling))
    if any(CONTROL.search(reading) for reading in readings):
        return None
    return frozenset(readings | {reading.lower() for reading in readings})


def _decodings(path: str) -> list[str] | None:
    """Return ``path`` undecoded, decoded but for its encoded slashes and backslashes,
    decoded once, and decoded until it no longer changes; None if that never happens."""
    kept = "".join(
        part if ENCODED_SEPARATOR.fullmatch(part) else _decoded(part)
        for part in ENCODED_SEPARATOR.split(path)
    )
    decodings = [path, kept]
    current = path
    for _ in range(MAX_DECODINGS):
        decoded = _decoded(current)
        if decoded == current:
            return decodings
        decodings.append(decoded)
        current = decoded
    return decodings if _decoded(current) == current else None


def _decoded(text: str) -> str:
    # bytes that are no UTF-8 stay distinct characters, never one replacement character
    return unquote(text, errors="surrogateescape")


def normalized(path: str) -> tuple[str, str]:
    """Return ``path`` with its dot segments removed (RFC 3986, 5.2.4) and its repeated
    slashes merged, in both orders (``/a//../b`` is ``/a/b`` or ``/b``)."""
    return (
        SLASHES.sub("/", remove_dot_segments(path)),
        remove_dot_segments(SLASHES.sub("/", path)),
    )


def remove_dot_segments(path: str) -> str:
    """Return ``path`` without ``.`` and ``..`` segments, as RFC 3986 resolves them."""
    if "." not in path:
        return path
    output: list[str] = []
    segments = path.split("/")
    for position, segment in enumerate(segments):
        last = position == len(segments) - 1
        if segment == ".":
            if last:
                output.append("")
        elif segment == "..":
            if len(output) > 1:
                output.pop()
            if last:
                output.append("")
        else:
            output.append(segment)
    result = "/".join(output)
    return result if result.startswith("/") else "/" + result


def host_name(host: str) -> str | None:
    """Return the name in a Host header: lowercased, without its port or a trailing dot;
    None when it is empty."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        name = host[: end + 1] if end > 0 else host
    else:
        name = host.rsplit(":", 1)[0] if ":" in host else host
    name = name.rstrip(".")
    return name or None


def host_matches(pattern: str, name: str) -> bool:
    """Return whether the host ``name`` is ``pattern``'s, a ``*.`` pattern matching every
    name below its domain (not the domain itself)."""
    if pattern.startswith("*."):
        return name.endswith(pattern[1:]) and len(name) > len(pattern) - 1
    return name == pattern
