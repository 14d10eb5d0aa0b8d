"""One parser per kind of setting: ``parse(name, text) -> value``, raising ConfigError.

Each takes the environment variable's name (for its message) and its text, and
returns the typed value or raises ConfigError in one line. Nothing here touches a
file: checks of paths on disk are ``app.instance``'s.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import urlsplit

from limits import RateLimitItem, parse_many

from app.config.store_url import parse_store_url, postgres_url_problem
from app.config.usernames import MAX_USERNAME_LENGTH, token_username_problem

T = TypeVar("T")
Choice = TypeVar("Choice", bound=str)
#: What every parser is: the variable's name and text in, the setting's value out.
Parser = Callable[[str, str], T]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Minimum length of the HS256 signing secret, in bytes (RFC 7518, section 3.2).
MIN_SECRET_BYTES = 32
#: Secrets that the project's own docs and examples have shown: public, so never usable.
PUBLISHED_SECRETS = frozenset({"change-me-to-48-random-url-safe-characters-from-secrets"})
HOW_TO_GENERATE_ONE = (
    "generate one with: python3 -c 'import secrets; print(secrets.token_urlsafe(48))'"
)
LOOPBACK_HOSTS = {"127.0.0.1", "::1", "localhost"}
HOST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252}[A-Za-z0-9])?")
#: One audience of TOKEN_AUDIENCE or of a registered client: a URL or a plain name.
AUDIENCE = re.compile(r"[!-+\--~]{1,256}")
PROVIDER_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
#: A host of LOGIN_RETURN_DOMAINS: lowercase DNS labels or an IPv4 address, with a leading
#: dot for its subdomains.
DNS_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
RETURN_DOMAIN = re.compile(rf"\.?{DNS_LABEL}(\.{DNS_LABEL})*")
#: A rate limit's window of zero: ``5 per 0 seconds``, ``5/0 minute``.
ZERO_WINDOW = re.compile(r"(/|\bper)\s*0+\s*[a-z]", re.IGNORECASE)
#: The schemes of TOKEN_STORE_URL: SQLite, then Redis (TCP, TLS, a Unix socket).


class ConfigError(ValueError):
    """A setting has a value the service cannot start with."""


def non_empty(name: str, value: str) -> str:
    if not value:
        raise ConfigError(f"{name} must not be empty")
    return value


def int_between(low: int, high: int) -> Parser[int]:
    def parse(name: str, value: str) -> int:
        try:
            number = int(value.strip(), 10)
        except ValueError:
            raise ConfigError(f"{name} must be a whole number, got {value!r}") from None
        if not low <= number <= high:
            raise ConfigError(f"{name} must be between {low} and {high}, got {number}")
        return number

    return parse


def seconds_between(low: float, high: float) -> Parser[float]:
    def parse(name: str, value: str) -> float:
        try:
            number = float(value.strip())
        except ValueError:
            raise ConfigError(f"{name} must be a number of seconds, got {value!r}") from None
        if not low <= number <= high:  # also refuses nan
            raise ConfigError(f"{name} must be between {low} and {high} seconds, got {value!r}")
        return number

    return parse


def boolean(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ConfigError(f"{name} must be true or false, got {value!r}")


def choice(
    choices: tuple[Choice, ...], *, verb: str = "be one of", got: bool = True
) -> Parser[Choice]:
    """Return a parser of one of ``choices``, matched whatever its case, as it is spelled there."""

    def parse(name: str, value: str) -> Choice:
        for option in choices:
            if value.strip().lower() == option.lower():
                return option
        shown = f", got {value!r}" if got else ""
        raise ConfigError(f"{name} must {verb} {', '.join(choices)}{shown}")

    return parse


def postgres_url(name: str, value: str) -> str:
    """Return a PostgreSQL URL that libpq reads; its message never quotes the URL."""
    from psycopg.conninfo import conninfo_to_dict  # only deployments on PostgreSQL need it

    try:
        parts = conninfo_to_dict(value)
        ports = str(parts.get("port") or "").split(",")
        if not all(port == "" or (port.isdigit() and 0 < int(port) < 65_536) for port in ports):
            raise ValueError("not a port")  # libpq reads it only when it connects
        # libpq ends the user-info at the first @: the tail of a password holding another
        # one would become the host, shown in every log line and sent to DNS
        if any("@" in str(parts.get(key) or "") for key in ("host", "hostaddr")):
            raise ValueError("user-info in the host")
    except Exception:  # libpq's message may quote part of the password: not shown
        raise ConfigError(
            f"{name} is not a usable PostgreSQL URL: check the host, the port, the"
            " database, the query parameters, and that a password with / : @ % is"
            " percent-encoded"
        ) from None
    problem = postgres_url_problem(parts)
    if problem is not None:
        raise ConfigError(f"{name} {problem}")
    return value


def secret(name: str, value: str) -> str:
    if len(value.encode()) < MIN_SECRET_BYTES:
        raise ConfigError(
            f"{name} must be at least {MIN_SECRET_BYTES} bytes long; {HOW_TO_GENERATE_ONE}"
        )
    if value.strip() in PUBLISHED_SECRETS:
        raise ConfigError(
            f"{name} is the example value from the project's docs, known to everyone; "
            + HOW_TO_GENERATE_ONE
        )
    return value


def previous_secrets(name: str, value: str) -> tuple[str, ...]:
    items = [item.strip() for item in value.split(",")]
    return tuple(
        secret(f"{name} (secret {number})", item)
        for number, item in enumerate((item for item in items if item), 1)
    )


def rate_limits(name: str, value: str) -> tuple[RateLimitItem, ...]:
    """Parse limits in Flask-Limiter's notation (``20 per second; 600 per minute``), or off."""
    text = value.strip()
    if text.lower() == "off":
        return ()
    example = "e.g. '20 per second; 600 per minute', or off"
    # limits reads a window of 0 seconds as 1: refuse it rather than guess
    if ZERO_WINDOW.search(text):
        raise ConfigError(f"{name}: a window must be at least 1, got {value!r} ({example})")
    try:
        items = parse_many(text)
    except ValueError:
        raise ConfigError(f"{name} must be rate limits, {example}; got {value!r}") from None
    if any(item.amount < 1 for item in items):
        raise ConfigError(f"{name}: a limit must allow at least 1 request (or {name}=off)")
    unique = {(item.amount, item.get_expiry()): item for item in items}  # each counted once
    return tuple(sorted(unique.values(), key=lambda item: item.get_expiry()))


def networks(name: str, value: str) -> tuple[IPNetwork, ...]:
    """Parse addresses and networks as the client addresses they are matched with are read
    (``app.http.proxy.parse_address``): an IPv4-mapped IPv6 one is its IPv4 address, and one
    with a zone id, which no client address carries, is refused."""
    found = []
    for item in (item.strip() for item in value.split(",")):
        if not item:
            continue
        if "%" in item:
            zone = item[item.index("%") :].split("/")[0]
            raise ConfigError(
                f"{name}: {item!r} has a zone id ({zone}), which no client's address carries,"
                " so it would never match; give the address without it"
            )
        try:
            found.append(unmapped_network(ipaddress.ip_network(item)))
        except ValueError:
            raise ConfigError(
                f"{name} must be comma-separated addresses or networks"
                f" (e.g. 127.0.0.0/8, ::1, 10.0.0.0/8), got {item!r}"
            ) from None
    return tuple(found)


def unmapped_network(network: IPNetwork) -> IPNetwork:
    """Return an IPv4-mapped IPv6 network (``::ffff:10.0.0.0/104``) as its IPv4 network."""
    if not isinstance(network, ipaddress.IPv6Network) or network.prefixlen < 96:
        return network
    mapped = network.network_address.ipv4_mapped
    if mapped is None:
        return network
    return ipaddress.IPv4Network((mapped, network.prefixlen - 96))


def absolute_path(name: str, value: str) -> str:
    return os.path.abspath(non_empty(name, value))


def absolute_paths(name: str, value: str) -> tuple[str, ...]:
    return tuple(os.path.abspath(item.strip()) for item in value.split(",") if item.strip())


def admin_username(name: str, value: str) -> str:
    if len(non_empty(name, value)) > MAX_USERNAME_LENGTH:
        raise ConfigError(
            f"{name} must be at most {MAX_USERNAME_LENGTH} characters, the longest username"
            " that can log in"
        )
    if problem := token_username_problem(value):  # the rule of every username that logs in
        raise ConfigError(f"{name} {problem}")
    return value


def host(name: str, value: str) -> str:
    bare = value.strip().removeprefix("[").removesuffix("]")
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        if HOST_NAME.fullmatch(bare):
            return bare
    raise ConfigError(f"{name} must be an IP address or a host name, got {value!r}")


def is_loopback_host(host: str) -> bool:
    """Return whether ``host`` (as ``host`` returns it) is this machine only; a name other
    than localhost may resolve to anything, so it is not."""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def cookie_name(name: str, value: str) -> str:
    # RFC 6265 token: visible ASCII except separators
    if not value or any(
        not 33 <= ord(char) <= 126 or char in '()<>@,;:\\"/[]?={}' for char in value
    ):
        raise ConfigError(f"{name} must be a cookie name (letters, digits, !#$%&'*+-.^_`|~)")
    return value


#: The characters of an http(s) URL with no query or fragment (RFC 3986: unreserved,
#: percent-encoded, sub-delims, ":", "@", "/", and brackets for an IPv6 host).
ISSUER_CHARACTERS = re.compile(r"[A-Za-z0-9\-._~%!$&'()*+,;=:@/\[\]]+")


def url(name: str, value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ConfigError(f"{name} must be an http(s) URL, got {value!r}")
    if parts.scheme == "http" and parts.hostname not in LOOPBACK_HOSTS:
        raise ConfigError(f"{name} must use https (http is allowed on loopback only)")
    return value.rstrip("/")


def issuer(name: str, value: str) -> str:
    """Return an issuer identifier (RFC 8414, section 2): an http(s) URL, kept exactly as
    written (every token's ``iss`` and every verifier's setting must match it byte for
    byte), with no query and no fragment."""
    url(name, value)
    parts = urlsplit(value)
    if parts.query or parts.fragment or "?" in value or "#" in value:
        raise ConfigError(f"{name} must be a URL with no query and no fragment, got {value!r}")
    if parts.username is not None or parts.password is not None:
        # published in the metadata and in every token: a user or password in it would be
        raise ConfigError(f"{name} must be a URL with no user or password in it")
    if not ISSUER_CHARACTERS.fullmatch(value):
        raise ConfigError(
            f"{name} must be a URL of RFC 3986's characters (a space or another as"
            f" %XX), got {value!r}"
        )
    return value


def audiences(name: str, value: str) -> tuple[str, ...]:
    """Return comma-separated audiences: each printable ASCII with no space, none twice."""
    names = tuple(item.strip() for item in value.split(",") if item.strip())
    for audience in names:
        if not AUDIENCE.fullmatch(audience):
            raise ConfigError(
                f"{name}: an audience is 1 to 256 printable ASCII characters, no space"
                f" or comma, got {audience[:40]!r}"
            )
    if len(set(names)) != len(names):
        raise ConfigError(f"{name} names an audience twice")
    return names


def return_domains(name: str, value: str) -> tuple[str, ...]:
    """Return comma-separated hosts, each ``app.example.com`` or ``.example.com`` (any
    subdomain), in lowercase; a scheme, port, path or wildcard is refused."""
    hosts = tuple(item.strip().lower() for item in value.split(",") if item.strip())
    for host in hosts:
        if not RETURN_DOMAIN.fullmatch(host) or len(host) > 253:
            raise ConfigError(
                f"{name}: each entry is a host (app.example.com) or a leading dot and a"
                f" domain for its subdomains (.example.com), got {host[:40]!r}"
            )
    return hosts


def subjects(name: str, value: str) -> tuple[str, ...]:
    """Return comma-separated names (groups, subjects, emails), each printable, none twice."""
    names = tuple(item.strip() for item in value.split(",") if item.strip())
    for item in names:
        if not item.isprintable() or len(item) > 256:
            raise ConfigError(f"{name}: an entry is at most 256 printable characters")
    if len(set(names)) != len(names):
        raise ConfigError(f"{name} names {names[0]!r} or another entry twice")
    return names


def redirect_target(name: str, value: str) -> str:
    if value.startswith("/") and not value.startswith("//"):
        return value
    return url(name, value)


def provider_names(name: str, value: str) -> tuple[str, ...]:
    names = tuple(item.strip() for item in value.split(",") if item.strip())
    for provider in names:
        if not PROVIDER_NAME.fullmatch(provider):
            raise ConfigError(f"{name}: provider names are lowercase a-z, 0-9, - and _")
    if len(set(names)) != len(names):
        raise ConfigError(f"{name} names a provider twice")
    return names


def store_url(name: str, value: str) -> str:
    """Return a store URL a backend can use; only its form is checked here, not its place."""
    try:
        location = parse_store_url(non_empty(name, value))
    except ValueError as error:
        raise ConfigError(str(error)) from None
    if location.backend == "sqlite":
        if location.path in {"", ":memory:"}:
            raise ConfigError(f"{name} needs a file path: sqlite:///<path>")
        return value
    if location.backend == "postgresql":
        return postgres_url(name, value)
    from redis.connection import parse_url  # only deployments on Redis need redis-py

    try:
        parse_url(value)
        database = urlsplit(value).path.strip("/")
        if value.startswith(("redis://", "rediss://")) and database and not database.isdigit():
            raise ValueError("the database must be a number")
    except ValueError:  # redis-py's message may quote part of the password: not shown
        raise ConfigError(
            f"{name} is not a usable Redis URL: check the host, the port, the database"
            " number, and that a password with / : @ is percent-encoded"
        ) from None
    return value
