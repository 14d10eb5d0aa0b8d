"""CONFIG_FILE: a TOML file whose keys are the settings' names, read below the environment.

Each value becomes the text its environment variable would hold, so the settings' own
parsers check it: a TOML string as it is; a boolean as ``true`` or ``false``; a number
as its digits; an array of strings or numbers as its items joined by commas. A setting
takes only the TOML types that fit it (``PORT = true`` is refused), and every error is
one line naming the file and the key.

A file that others may write is refused, and so is one that holds a secret (a signing
secret, a provider's client secret, a store URL with a password) and that others may
read: the service would otherwise start with settings or secrets anyone on the host
can change or read.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from app.config.parsers import ConfigError

#: The variable that names the file; it is read from the environment only.
CONFIG_FILE: Final = "CONFIG_FILE"
#: Largest file read, in bytes: a settings file is a few kilobytes.
MAX_FILE_BYTES = 1024 * 1024
#: A key shown as it is in a message; any other is quoted.
PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")
#: What a masked secret shows, whatever its length.
MASK: Final = "********"
#: The TOML types each kind of setting takes, by the name its error message gives them.
KIND_NAMES = {
    bool: "a boolean",
    int: "a whole number",
    float: "a number",
    list: "an array",
    str: "a string",
}


@dataclass(frozen=True)
class ConfigFileValues:
    """The settings a CONFIG_FILE gives, as the text an environment variable would hold."""

    path: str
    values: Mapping[str, str]


def read_config_file(
    path: str,
    kinds_of: Callable[[str], frozenset[type] | None],
    is_secret: Callable[[str, str], bool],
) -> ConfigFileValues:
    """Read the TOML file at ``path``; raise ConfigError in one line naming it (and the key).

    ``kinds_of(key)`` returns the TOML types the setting takes, or None when ``key`` is no
    setting (the caller has already said which setting it resembles, if any).
    """
    table, mode = _load(path)
    values: dict[str, str] = {}
    for key, value in table.items():
        kinds = kinds_of(key)
        if kinds is None:
            raise ConfigError(f"{CONFIG_FILE} {path}: {shown_key(key)} is not a setting")
        values[key] = toml_text(path, key, value, kinds)
    if mode & stat.S_IWOTH:
        raise ConfigError(
            f"{CONFIG_FILE} {path} may be changed by any user (mode {mode & 0o777:04o}):"
            f" chmod o-w {path}"
        )
    if mode & stat.S_IROTH:
        for key, text in values.items():
            if is_secret(key, text):
                raise ConfigError(
                    f"{CONFIG_FILE} {path} holds the secret {key} but any user may read it"
                    f" (mode {mode & 0o777:04o}): chmod o-r {path}, or set {key} in the"
                    " environment instead"
                )
    return ConfigFileValues(path, values)


def shown_key(key: str) -> str:
    """Return a file's key as a message shows it: quoted unless it is a plain name, so that
    a quoted TOML key holding a line break or spaces keeps the message one clear line."""
    return key if PLAIN_KEY.fullmatch(key) else repr(key)


def _load(path: str) -> tuple[dict[str, object], int]:
    """Return the file's TOML table and its permission bits; never wait on a FIFO."""
    where = f"{CONFIG_FILE} {path}"
    if not os.path.isabs(path):
        raise ConfigError(f"{CONFIG_FILE} must be an absolute path, got {path!r}")
    try:
        # a link is followed (a Kubernetes ConfigMap's files are links); O_NONBLOCK keeps
        # a FIFO from holding the start until someone writes to it
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        raise ConfigError(f"{where}: cannot read it: {error.strerror}") from None
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise ConfigError(f"{where} is not a regular file")
        if status.st_size > MAX_FILE_BYTES:
            raise ConfigError(f"{where} is larger than {MAX_FILE_BYTES} bytes")
        content = os.read(descriptor, MAX_FILE_BYTES + 1)
    finally:
        os.close(descriptor)
    try:
        table = tomllib.loads(content.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{where} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as error:  # its message names a line, never a value
        raise ConfigError(f"{where} is not valid TOML: {error}") from None
    return table, status.st_mode


def toml_text(path: str, key: str, value: object, kinds: frozenset[type]) -> str:
    """Return the environment variable's text for ``key``'s TOML ``value``."""
    kind = type(value)
    if kind not in kinds:
        takes = " or ".join(KIND_NAMES[item] for item in sorted(kinds, key=_kind_order))
        got = KIND_NAMES.get(kind, "a table" if isinstance(value, dict) else "a date or time")
        raise ConfigError(f"{CONFIG_FILE} {path}: {key} must be {takes}, got {got}")
    if isinstance(value, list):
        items = [_item_text(path, key, item) for item in value]
        return ", ".join(items)
    return _scalar_text(value)


def _item_text(path: str, key: str, item: object) -> str:
    if not isinstance(item, str | int | float) or isinstance(item, bool):
        raise ConfigError(f"{CONFIG_FILE} {path}: {key} must be an array of strings")
    text = _scalar_text(item)
    if "," in text or ";" in text:  # it would split into two items
        raise ConfigError(f"{CONFIG_FILE} {path}: {key}: an item holds a comma or a semicolon")
    return text


def _scalar_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _kind_order(kind: type) -> int:
    return list(KIND_NAMES).index(kind)


#: A store URL's query parameters that hold a secret: libpq's password, and the one of
#: the client certificate's key.
SECRET_QUERY_PARAMETERS = frozenset({"password", "sslpassword"})


def url_password(url: str) -> str | None:
    """Return the password a store URL carries (in its user-info or query), or None."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # a URL the settings will refuse: treat it as holding one
        return url
    if password:
        return password
    for name, value in parse_qsl(parts.query):
        if name in SECRET_QUERY_PARAMETERS and value:
            return value
    return None


def mask_url_password(url: str) -> str:
    """Return ``url`` with its password, in the user-info or the query, masked."""
    if url_password(url) is None:
        return url
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password:
            user_info, host = netloc.rsplit("@", 1)
            user = user_info.split(":", 1)[0]
            netloc = f"{user}:{MASK}@{host}"
        query = urlencode(
            [
                (name, MASK if name in SECRET_QUERY_PARAMETERS else value)
                for name, value in parse_qsl(parts.query, keep_blank_values=True)
            ],
            safe="*",
        )
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        return MASK
