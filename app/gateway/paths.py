"""How an upstream could read a request's path and host.

A proxy asks about the path as the client sent it. Upstreams differ in what they make
of it: some decode percent-encoding once, or again; some take a backslash or an encoded
slash for a separator; Java servers drop ``;`` parameters (``/x/..;/admin`` is
``/admin`` there); most resolve dot segments and merge repeated slashes; some ignore
case, some as Unicode folds it (dotless i and long s as ``i`` and ``s``); a URL parser takes
``//host/x`` for a host and the path ``/x``; Windows servers trim trailing dots and spaces
of a segment. ``path_readings`` returns every path those readings give, so that the
judging can take the strictest verdict among them: no spelling of a path moves it to a
laxer rule than the one its canonical form matches. What no reading settles is refused: a
raw ``#`` (a client never sends one), IIS's ``%u`` escapes, and bytes that are no UTF-8
(overlong dots among them).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote

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
#: Any character beyond ASCII (a case fold), a space, and a dot ending a segment count.
TRICKS = re.compile(r"[^!$&'()*+,\-.0-9:=@A-Z_a-z~/]|//|/\.|\.(?:/|$)")
PARAMETERS = re.compile(r";[^/]*")
ENCODED_SEPARATOR = re.compile(r"(%2[fF]|%5[cC])")
SLASHES = re.compile(r"/{2,}")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: What a decoding holds that no reading settles: IIS's ``%u0061``, a byte that is no UTF-8.
UNREADABLE = re.compile(r"%[uU]|[\udc80-\udcff]")
#: Where a path ends to a parser that reads it as a URL: a query, or a fragment.
CUT = re.compile(r"[?#]")
#: Characters beyond ASCII that Unicode case mapping (lower, upper, casefold, or a first
#: character before combining marks, as Java's one-character mapping) turns into ASCII
#: letters, and those letters: a case-insensitive matcher may read ``/adm\u0131n`` (a
#: dotless i) as ``/admin``.
FOLDS = {
    "\u00df": "ss",  # sharp s
    "\u0130": "i",  # I with dot above
    "\u0131": "i",  # dotless i
    "\u017f": "s",  # long s
    "\u01f0": "j",  # j with caron
    "\u1e96": "h",  # h with line below
    "\u1e97": "t",  # t with diaeresis
    "\u1e98": "w",  # w with ring above
    "\u1e99": "y",  # y with ring above
    "\u1e9e": "ss",  # capital sharp s
    "\u212a": "k",  # Kelvin sign
    "\ufb00": "ff",  # ligatures
    "\ufb01": "fi",
    "\ufb02": "fl",
    "\ufb03": "ffi",
    "\ufb04": "ffl",
    "\ufb05": "st",
    "\ufb06": "st",
}
FOLDING = str.maketrans(FOLDS)
#: A Host header as a client may rightly send it: a name or [IPv6], then a port.
HOST_HEADER = re.compile(r"([a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?\.?|\[[0-9a-f:.]+\])(:[0-9]{1,5})?")
#: A segment's trailing dots and spaces, which Windows servers drop.
TRAILING = re.compile(r"[. ](?=/|$)")
#: A host name, or an IP address, as a rule may name it (with ``*.`` before a domain).
HOST_PATTERN = re.compile(r"(\*\.)?[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?|\[[0-9a-f:.]+\]")


def request_target_path(uri: str) -> str | None:
    """Return the path of a request target (origin or absolute form), or None if it has none."""
    target = uri.split("?", 1)[0]
    if target.startswith("/"):
        return target
    scheme, separator, rest = target.partition("://")
    if separator and scheme.lower() in {"http", "https"}:
        slash = rest.find("/")
        return "/" if slash < 0 else rest[slash:]
    return None


def path_readings(uri: str) -> frozenset[str] | None:
    """Return every path an upstream could read in ``uri``, lowercased ones included, or
    None when it is no path, holds a raw ``#``, reads as one holding a control character,
    or a decoding of it is ``UNREADABLE``."""
    path = request_target_path(uri)
    if path is None or len(path) > MAX_PATH_LENGTH:
        return None
    if TRICKS.search(path) is None:
        return frozenset((path, path.lower()))
    if len(path) > MAX_TRICKY_PATH_LENGTH or "#" in uri:
        return None
    spellings: set[str] = set()
    for before in {path, PARAMETERS.sub("", path)}:
        decodings = _decodings(before)
        if decodings is None:
            return None
        for decoded in set(decodings):
            for separated in {decoded, decoded.replace("\\", "/")}:
                spellings.update((separated, PARAMETERS.sub("", separated)))
    if any(UNREADABLE.search(spelling) for spelling in spellings):
        return None
    # a decoded ? or # (%3F, %23) ends the path to an upstream that parses it again
    spellings |= {CUT.split(spelling, 1)[0] for spelling in spellings if CUT.search(spelling)}
    spellings |= {trimmed(spelling) for spelling in spellings if TRAILING.search(spelling)}
    for spelling in list(spellings):
        for resolved in {spelling, remove_dot_segments(spelling)}:
            if resolved.startswith("//"):  # a URL parser's authority, then the path
                slash = resolved.find("/", len(resolved) - len(resolved.lstrip("/")))
                spellings.add("/" if slash < 0 else resolved[slash:])
    readings = {path}
    for spelling in spellings:
        readings.update(normalized(spelling))
    if any(CONTROL.search(reading) for reading in readings):
        return None
    readings |= {reading.lower() for reading in readings}
    if not path.isascii() or any(not reading.isascii() for reading in readings):
        readings |= {reading.translate(FOLDING).lower() for reading in readings}
    return frozenset(readings)


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


def trimmed(path: str) -> str:
    """Return ``path`` with each segment's trailing dots and spaces dropped, as Windows
    does; a segment of dots and spaces only reads as ``.`` or ``..`` (``...`` as ``..``)."""
    segments = []
    for segment in path.split("/"):
        kept = segment.rstrip(". ")
        if not kept and "." in segment:
            kept = "." if segment.count(".") == 1 else ".."
        segments.append(kept)
    return "/".join(segments)


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


def query_methods(uri: str) -> tuple[str, ...]:
    """Return the methods a ``_method`` parameter of the query names, upper-cased: many
    frameworks take it for the request's method (some split the query at ``;`` too)."""
    query = uri.partition("?")[2]
    if "method" not in query.lower() and "%" not in query:  # the usual: no such parameter
        return ()
    pairs = parse_qsl(query.replace(";", "&"), keep_blank_values=True, errors="replace")
    return tuple(
        value.strip().upper()
        for key, value in pairs
        if parameter_name(key) == "_method" and value.strip()
    )


def parameter_name(key: str) -> str:
    """Return a query parameter's name as the laxest framework reads it: stripped and
    lower-cased, and as PHP reads it, whose ``.``, space and first ``[`` become ``_``
    (so ``.method`` and ``[method`` are Laravel's ``_method``)."""
    name = key.strip().lower()
    return name.replace(".", "_").replace(" ", "_").replace("[", "_", 1)


def host_name(host: str) -> str | None:
    """Return the name in a Host header: lowercased, without its port or a trailing dot;
    None when it is empty or not a name or [IPv6] with an optional port (``a:80:81``,
    ``a@b``, ``a;b``: an upstream may read another name in it)."""
    host = host.strip().lower()
    if not HOST_HEADER.fullmatch(host):
        return None
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
