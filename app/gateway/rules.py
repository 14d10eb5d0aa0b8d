"""The rules file (ACCESS_RULES_FILE): ordered rules by host, path and method, checked and
compiled once when it is read, and judged against an original request.

The file is TOML, read by the standard library::

    [[rules]]
    hosts = ["app.example.com", "*.example.com"]  # optional: any host when absent
    paths = ["/admin/", "re:^/api/v[0-9]+/admin"]  # optional: prefixes, or "re:" and a regex
    methods = ["POST", "DELETE"]                   # optional: any method when absent
    allow = "admin"                                # "public", "user", "admin" or "deny"

The first rule that matches wins; a request no rule matches is denied. A rule that
depends on what the request does not tell (a proxy that is not trusted names no path)
denies. A path is judged in every reading ``app.gateway.paths`` gives, and the strictest
verdict among them stands. ``rules[1]`` is the file's first rule.
"""

from __future__ import annotations

import functools
import json
import os
import re
import tomllib
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from app.gateway.paths import HOST_PATTERN, host_matches, host_name, path_readings, query_methods

#: The setting that names the file, at the start of every error.
SETTING = "ACCESS_RULES_FILE"
RULE_KEYS = frozenset({"hosts", "paths", "methods", "allow"})
REGEX_PREFIX = "re:"
#: A method as HTTP spells one (RFC 9110's token), upper case.
METHOD = re.compile(r"[A-Z!#$%&'*+.^_`|~0-9-]+")
#: An upper-case letter of a path pattern that is no escape's (``\S``, ``\W``...).
UPPER_CASE_LETTER = re.compile(r"(?<!\\)[A-Z]")
#: A pattern of one branch anchored at the start to a literal character other than /,
#: which no path read begins with: ``^admin`` can never match.
ANCHORED_AWAY_FROM_ROOT = re.compile(r"\^[^/\\(\[.^$|?*+{][^|]*\Z")
#: Distinct original requests whose judgment each process keeps (a few hundred bytes each).
JUDGMENTS_CACHED = 4096
#: A larger file is refused: no rules file needs so much.
MAX_FILE_BYTES = 1024 * 1024


class RulesFileError(ValueError):
    """The rules file cannot be used; the message is one line naming the file or the rule."""


#: The last rules each file was read into in this process. gunicorn's master reads the file
#: at start, at each HUP and before each fork, so a worker it forks inherits the master's
#: last good reading: a file broken since then is logged, and never stops a worker booting.
_read_well: dict[str, AccessRules] = {}


def last_read_well(path: str) -> AccessRules | None:
    """Return the rules ``path`` was last read into well in this process, or None."""
    return _read_well.get(path)


class Verdict(IntEnum):
    """What a rule allows, in order of strictness: a higher one is stricter."""

    PUBLIC = 0
    USER = 1
    ADMIN = 2
    DENY = 3

    @property
    def word(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class Rule:
    """One rule: its place in the file (from 1), its conditions, its verdict and its text."""

    number: int
    hosts: tuple[str, ...]
    paths: tuple[str, ...]
    methods: frozenset[str] | None
    verdict: Verdict
    text: str
    prefixes: tuple[str, ...] = field(repr=False)
    patterns: tuple[re.Pattern[str], ...] = field(repr=False)

    def path_matches(self, path: str) -> bool:
        """Return whether ``path`` is under one of the prefixes (a prefix ending in ``/``
        also takes the path without that slash) or matches one of the expressions."""
        for prefix in self.prefixes:
            if path.startswith(prefix) or (prefix.endswith("/") and path == prefix[:-1]):
                return True
        return any(pattern.search(path) for pattern in self.patterns)


@dataclass(frozen=True)
class Judgment:
    """The verdict on an original request, the rule that gave it (None: no rule matched),
    and what the request did not tell that the rule needed (None: nothing)."""

    verdict: Verdict
    rule: Rule | None
    unknown: str | None = None


#: An original request no rule matches.
NO_MATCH = Judgment(Verdict.DENY, None)


class AccessRules:
    """The rules of one reading of the file, compiled; ``judge`` is kept per request."""

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        self.rules = rules
        self.by_host = any(rule.hosts for rule in rules)
        self.judge = functools.lru_cache(maxsize=JUDGMENTS_CACHED)(self._judge)

    def _judge(
        self, methods: tuple[str, ...] | None, host: str | None, uri: str | None
    ) -> Judgment:
        """Return the strictest judgment among every method given (and any a ``_method``
        parameter of the query names) and every reading of the path; None for what the
        request does not tell. A host that is no plain name is denied where a rule names
        hosts."""
        readings: frozenset[str] | tuple[None] = (None,)
        if uri is not None:
            found = path_readings(uri)
            if found is None:
                return Judgment(Verdict.DENY, None, "a readable path")
            readings = found
            if methods and "?" in uri:
                methods = (*methods, *query_methods(uri))
        name = None if host is None else host_name(host)
        if name is None and host is not None and self.by_host:
            return Judgment(Verdict.DENY, None, "a readable host")
        strictest: Judgment | None = None
        for method in method_readings(methods):
            for path in readings:
                judgment = self._first_match(method, name, path)
                if strictest is None or judgment.verdict > strictest.verdict:
                    strictest = judgment
                    if judgment.verdict is Verdict.DENY:
                        return judgment
        assert strictest is not None  # one method and one reading at least
        return strictest

    def _first_match(self, method: str | None, host: str | None, path: str | None) -> Judgment:
        for rule in self.rules:
            if rule.hosts:
                if host is None:
                    return Judgment(Verdict.DENY, rule, "the host")
                if not any(host_matches(pattern, host) for pattern in rule.hosts):
                    continue
            if rule.methods is not None:
                if method is None:
                    return Judgment(Verdict.DENY, rule, "the method")
                if method not in rule.methods:
                    continue
            if rule.paths:
                if path is None:
                    return Judgment(Verdict.DENY, rule, "the path")
                if not rule.path_matches(path):
                    continue
            return Judgment(rule.verdict, rule)
        return NO_MATCH


def method_readings(methods: tuple[str, ...] | None) -> tuple[str | None, ...]:
    """Return every method an upstream may take the named ones for: each as named and
    upper-cased (an upstream may take ``get`` for GET), and GET beside HEAD (an upstream
    answers a HEAD as its GET); (None,) when none is named (an empty one names none)."""
    named = {method.strip() for method in methods or ()} - {""}
    if not named:
        return (None,)
    read = named | {method.upper() for method in named}
    if "HEAD" in read:
        read.add("GET")
    return tuple(sorted(read))


def read_rules_file(path: str) -> AccessRules:
    """Return the rules of the file at ``path``; raise RulesFileError saying what is wrong."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise RulesFileError(f"{SETTING} {path} cannot be read: {error.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise RulesFileError(f"{SETTING} {path} is larger than {MAX_FILE_BYTES} bytes")
    rules = parse_rules(data, path)
    _read_well[path] = rules
    return rules


def parse_rules(data: bytes, path: str = SETTING) -> AccessRules:
    """Return the rules of a file's bytes; raise RulesFileError in one line."""
    try:
        document = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        reason = " ".join(str(error).split())
        raise RulesFileError(f"{SETTING} {path}: not TOML ({reason})") from None
    except RecursionError:  # arrays nested thousands deep
        raise RulesFileError(f"{SETTING} {path}: not TOML (nested too deep)") from None
    unknown = sorted(set(document) - {"rules"})
    if unknown:
        raise RulesFileError(f"{SETTING}: unknown key {unknown[0]!r} (only [[rules]])")
    tables = document.get("rules")
    if not isinstance(tables, list) or not tables:
        raise RulesFileError(f"{SETTING} {path}: no [[rules]]")
    rules: list[Rule] = []
    for number, table in enumerate(tables, start=1):
        rule = _rule(number, table)
        for earlier in rules:
            if covers(earlier, rule):
                raise RulesFileError(
                    f"{SETTING} rules[{number}]: never matches: rules[{earlier.number}]"
                    " matches every request it would"
                )
        rules.append(rule)
    return AccessRules(tuple(rules))


def _rule(number: int, table: Any) -> Rule:
    where = f"{SETTING} rules[{number}]"
    if not isinstance(table, dict):
        raise RulesFileError(f"{where}: not a table")
    unknown = sorted(set(table) - RULE_KEYS)
    if unknown:
        raise RulesFileError(
            f"{where}: unknown key {unknown[0]!r} (hosts, paths, methods and allow)"
        )
    allow = table.get("allow")
    if allow is None:
        raise RulesFileError(f"{where}: allow is required (public, user, admin or deny)")
    if (
        not isinstance(allow, str)
        or allow.upper() not in Verdict.__members__
        or allow != allow.lower()
    ):
        raise RulesFileError(f"{where}: unknown verdict {allow!r} (public, user, admin or deny)")
    hosts = tuple(_host(where, host) for host in _strings(where, table, "hosts"))
    paths = _strings(where, table, "paths")
    prefixes: list[str] = []
    patterns: list[re.Pattern[str]] = []
    for path in paths:
        if path.startswith(REGEX_PREFIX):
            patterns.append(_pattern(where, path[len(REGEX_PREFIX) :]))
        else:
            prefixes.append(_prefix(where, path))
    methods = None
    if "methods" in table:
        names = _strings(where, table, "methods")
        for method in names:
            if not METHOD.fullmatch(method):
                raise RulesFileError(f"{where}: bad method {method!r} (upper case, as HTTP)")
        methods = frozenset(names)
    return Rule(
        number=number,
        hosts=hosts,
        paths=paths,
        methods=methods,
        verdict=Verdict[allow.upper()],
        text=rule_text(table),
        prefixes=tuple(prefixes),
        patterns=tuple(patterns),
    )


def _strings(where: str, table: dict[str, Any], key: str) -> tuple[str, ...]:
    if key not in table:
        return ()
    values = table[key]
    if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
        raise RulesFileError(f"{where}: {key} must be a list of strings")
    if not values:
        raise RulesFileError(f"{where}: {key} is empty (leave it out to match any)")
    return tuple(values)


def _host(where: str, host: str) -> str:
    name = host.lower().rstrip(".")
    if not HOST_PATTERN.fullmatch(name):
        raise RulesFileError(f"{where}: bad host {host!r} (a name, or *. and a domain; no port)")
    return name


def _prefix(where: str, prefix: str) -> str:
    problem = None
    if not prefix.startswith("/"):
        problem = "must start with /"
    elif "*" in prefix:
        problem = "is no pattern (a * matches only a *; for a pattern, use re:)"
    elif prefix != prefix.lower():
        problem = "must be lower case (paths are compared lowercased too)"
    elif path_readings(prefix) != frozenset((prefix,)):
        problem = "must be a plain path (no %, \\, ;, //, . or .. segments)"
    if problem:
        raise RulesFileError(f"{where}: bad path {prefix!r}: a prefix {problem}")
    return prefix


def _pattern(where: str, expression: str) -> re.Pattern[str]:
    try:
        with warnings.catch_warnings():
            # "possible nested set" and the like: a pattern Python will read otherwise
            warnings.simplefilter("error", FutureWarning)
            pattern = re.compile(expression)
    except (re.error, OverflowError, RecursionError, FutureWarning) as error:
        # OverflowError: a repeat count past the engine's; RecursionError: nesting too deep
        reason = error if isinstance(error, re.error | FutureWarning) else type(error).__name__
        raise RulesFileError(f"{where}: bad pattern {expression!r}: {reason}") from None
    if ANCHORED_AWAY_FROM_ROOT.match(expression):
        raise RulesFileError(
            f"{where}: bad pattern {expression!r}: never matches (a path starts with /)"
        )
    if UPPER_CASE_LETTER.search(expression):
        # an upper-case letter never matches the lower-cased readings, where an upstream
        # that takes paths case-insensitively would find the path the rule means
        raise RulesFileError(
            f"{where}: bad pattern {expression!r}: must be lower case, as prefixes are"
            " (paths are compared lowercased too); \\S, \\W and the like may stay"
        )
    return pattern


def rule_text(table: dict[str, Any]) -> str:
    """Return a rule as one line of TOML, its keys in the documented order."""
    return ", ".join(
        f"{key} = {json.dumps(table[key])}"
        for key in ("hosts", "paths", "methods", "allow")
        if key in table
    )


def covers(earlier: Rule, later: Rule) -> bool:
    """Return whether ``earlier`` matches every request ``later`` matches (so ``later``
    never decides); False where that cannot be told for sure (expressions)."""
    if earlier.hosts and not (
        later.hosts and all(any(_host_covers(a, b) for a in earlier.hosts) for b in later.hosts)
    ):
        return False
    if earlier.methods is not None and (
        later.methods is None or not later.methods <= earlier.methods
    ):
        return False
    if not earlier.paths or "/" in earlier.prefixes:  # every path a request names
        return True
    if not later.paths:
        return False
    expressions = {pattern.pattern for pattern in earlier.patterns}
    return all(
        any(prefix.startswith(other) for other in earlier.prefixes) for prefix in later.prefixes
    ) and all(pattern.pattern in expressions for pattern in later.patterns)


def _host_covers(pattern: str, other: str) -> bool:
    if pattern == other:
        return True
    return pattern.startswith("*.") and other.endswith(pattern[1:])


class AccessRulesFile:
    """The rules of ACCESS_RULES_FILE as this process last read them.

    The file is looked at again at most once a ``interval`` seconds (its inode, size and
    mtime); a changed file that reads well replaces the rules, one that does not is
    reported to ``on_error`` and the rules in force stay, so a bad edit never fails a
    request. A bad file at the start is refused (``read_rules_file`` raises), unless this
    process read it well before (``last_read_well``: a worker of gunicorn's master, or an
    app made again): then it is reported, and that last good reading is in force.
    """

    def __init__(
        self,
        path: str,
        monotonic: Callable[[], float],
        on_error: Callable[[str], None],
        interval: float = 1.0,
    ) -> None:
        self.path = path
        self.monotonic = monotonic
        self.on_error = on_error
        self.interval = interval
        self._signature = _signature(path)
        try:
            self._rules = read_rules_file(path)
        except RulesFileError as error:
            last = last_read_well(path)
            if last is None:
                raise
            on_error(str(error))
            self._rules = last
        self._next_look = monotonic() + interval

    def current(self) -> AccessRules:
        """Return the rules in force, read again first if the file changed."""
        if self.monotonic() >= self._next_look:
            self._next_look = self.monotonic() + self.interval
            signature = _signature(self.path)
            if signature != self._signature:
                self._signature = signature
                try:
                    self._rules = read_rules_file(self.path)
                except RulesFileError as error:
                    self.on_error(str(error))
        return self._rules


def _signature(path: str) -> tuple[int, int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (status.st_ino, status.st_size, status.st_mtime_ns)
