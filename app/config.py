"""Typed settings read from the environment, validated once at start-up."""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import os
import re
import secrets
import sqlite3
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit

from flask import current_app
from limits import RateLimitItem, parse_many

from app.keys import (
    ALGORITHMS,
    HS256,
    KeyFileError,
    KeyRing,
    create_private_file,
    load_key_ring,
    new_private_key_pem,
)
from app.tokens import DEFAULT_CLOCK_SKEW, MAX_USERNAME_LENGTH, token_username_problem

#: Minimum length of the HS256 signing secret, in bytes (RFC 7518, section 3.2).
MIN_SECRET_BYTES = 32
#: Largest request body the service reads, in bytes (DESIGN.md: 16 KiB).
MAX_BODY_BYTES = 16 * 1024
#: Longest refresh-token lifetime, in seconds (ten years): a typo of a few digits is refused.
MAX_REFRESH_TOKEN_LIFETIME = 10 * 365 * 86_400
#: Longest grace for retrying a rotation with the retired token (Cognito's maximum too).
MAX_REUSE_GRACE = 60
#: Most live refresh tokens one user may be allowed (the limit is checked at each login).
MAX_TOKENS_PER_USER = 1000
#: Name of the generated secret's file in the instance folder.
SECRET_FILE_NAME = "signing_secret"  # noqa: S105 (a file name)
#: Name of the generated private key's file in the instance folder, per algorithm.
KEY_FILE_NAMES = {"EdDSA": "signing_key_eddsa.pem", "ES256": "signing_key_es256.pem"}
#: Name of the default SQLite file in the instance folder.
SQLITE_FILE_NAME = "refresh_tokens.sqlite3"
#: Per client address, on /login and on /token each (README, "Rate limits"): a burst of a
#: page's calls passes, a runaway client is stopped within a second, and 600 users behind
#: one NAT can each refresh a 60-second access token every minute.
DEFAULT_RATE_LIMIT_AUTH = "20 per second; 600 per minute"
#: Addresses never limited: the host itself (a local proxy, probes, an operator's curl).
DEFAULT_RATE_LIMIT_EXEMPT = "127.0.0.0/8, ::1"
#: Failed password checks per username (README, "Rate limits"), with USERS_FILE.
DEFAULT_LOGIN_FAILURE_LIMIT = "10 per minute"
#: Addresses that GET /metrics answers: the host itself (a local Prometheus or agent).
DEFAULT_METRICS_ALLOW = "127.0.0.0/8, ::1"
#: Where the instance folder is when INSTANCE_PATH is unset: ``instance/`` beside ``app/``.
DEFAULT_INSTANCE_PATH = os.path.join(os.path.dirname(os.path.dirname(__file__)), "instance")
#: Secrets that the project's own docs and examples have shown: public, so never usable.
PUBLISHED_SECRETS = frozenset({"change-me-to-48-random-url-safe-characters-from-secrets"})
HOW_TO_GENERATE_ONE = (
    "generate one with: python3 -c 'import secrets; print(secrets.token_urlsafe(48))'"
)
LOOPBACK_HOSTS = {"127.0.0.1", "::1", "localhost"}
HOST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252}[A-Za-z0-9])?")
PROVIDER_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
PROVIDER_SETTING = re.compile(r"OIDC_[A-Z0-9_]+_(ISSUER|CLIENT_ID|CLIENT_SECRET|SCOPES)")
#: A rate limit's window of zero: ``5 per 0 seconds``, ``5/0 minute``.
ZERO_WINDOW = re.compile(r"(/|\bper)\s*0+\s*[a-z]", re.IGNORECASE)

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class ConfigError(ValueError):
    """A setting has a value the service cannot start with."""


def _non_empty(name: str, value: str) -> str:
    if not value:
        raise ConfigError(f"{name} must not be empty")
    return value


def _int_between(low: int, high: int) -> Callable[[str, str], int]:
    def parse(name: str, value: str) -> int:
        try:
            number = int(value.strip(), 10)
        except ValueError:
            raise ConfigError(f"{name} must be a whole number, got {value!r}") from None
        if not low <= number <= high:
            raise ConfigError(f"{name} must be between {low} and {high}, got {number}")
        return number

    return parse


def _seconds_between(low: float, high: float) -> Callable[[str, str], float]:
    def parse(name: str, value: str) -> float:
        try:
            number = float(value.strip())
        except ValueError:
            raise ConfigError(f"{name} must be a number of seconds, got {value!r}") from None
        if not low <= number <= high:  # also refuses nan
            raise ConfigError(f"{name} must be between {low} and {high} seconds, got {value!r}")
        return number

    return parse


def _boolean(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ConfigError(f"{name} must be true or false, got {value!r}")


def _log_level(name: str, value: str) -> str:
    level = value.strip().upper()
    if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
        raise ConfigError(f"{name} must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
    return level


def _one_of(*choices: str) -> Callable[[str, str], str]:
    def parse(name: str, value: str) -> str:
        choice = value.strip().lower()
        if choice not in choices:
            raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
        return choice

    return parse


def _secret(name: str, value: str) -> str:
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


def _previous_secrets(name: str, value: str) -> tuple[str, ...]:
    items = [item.strip() for item in value.split(",")]
    return tuple(
        _secret(f"{name} (secret {number})", item)
        for number, item in enumerate((item for item in items if item), 1)
    )


def _signing_algorithm(name: str, value: str) -> str:
    for algorithm in ALGORITHMS:
        if value.strip().lower() == algorithm.lower():
            return algorithm
    raise ConfigError(f"{name} must be {', '.join(ALGORITHMS)}, got {value!r}")


def _rate_limits(name: str, value: str) -> tuple[RateLimitItem, ...]:
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


def _networks(name: str, value: str) -> tuple[IPNetwork, ...]:
    networks = []
    for item in (item.strip() for item in value.split(",")):
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item))
        except ValueError:
            raise ConfigError(
                f"{name} must be comma-separated addresses or networks"
                f" (e.g. 127.0.0.0/8, ::1, 10.0.0.0/8), got {item!r}"
            ) from None
    return tuple(networks)


def _users_file(name: str, value: str) -> str:
    """Return the user directory's path, its folder existing; the file is checked in load."""
    path = _absolute_path(name, value)
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise ConfigError(f"{name}: the folder {folder} does not exist")
    return path


def _absolute_paths(name: str, value: str) -> tuple[str, ...]:
    return tuple(os.path.abspath(item.strip()) for item in value.split(",") if item.strip())


def _admin_username(name: str, value: str) -> str:
    if len(_non_empty(name, value)) > MAX_USERNAME_LENGTH:
        raise ConfigError(
            f"{name} must be at most {MAX_USERNAME_LENGTH} characters, the longest username"
            " that can log in"
        )
    if problem := token_username_problem(value):  # the rule of every username that logs in
        raise ConfigError(f"{name} {problem}")
    return value


def _host(name: str, value: str) -> str:
    host = value.strip().removeprefix("[").removesuffix("]")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        if HOST_NAME.fullmatch(host):
            return host
    raise ConfigError(f"{name} must be an IP address or a host name, got {value!r}")


def _cookie_name(name: str, value: str) -> str:
    # RFC 6265 token: visible ASCII except separators
    if not value or any(
        not 33 <= ord(char) <= 126 or char in '()<>@,;:\\"/[]?={}' for char in value
    ):
        raise ConfigError(f"{name} must be a cookie name (letters, digits, !#$%&'*+-.^_`|~)")
    return value


def _absolute_path(name: str, value: str) -> str:
    return os.path.abspath(_non_empty(name, value))


def _url(name: str, value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ConfigError(f"{name} must be an http(s) URL, got {value!r}")
    if parts.scheme == "http" and parts.hostname not in LOOPBACK_HOSTS:
        raise ConfigError(f"{name} must use https (http is allowed on loopback only)")
    return value.rstrip("/")


def _redirect_target(name: str, value: str) -> str:
    if value.startswith("/") and not value.startswith("//"):
        return value
    return _url(name, value)


def _provider_names(name: str, value: str) -> tuple[str, ...]:
    names = tuple(item.strip() for item in value.split(",") if item.strip())
    for provider in names:
        if not PROVIDER_NAME.fullmatch(provider):
            raise ConfigError(f"{name}: provider names are lowercase a-z, 0-9, - and _")
    if len(set(names)) != len(names):
        raise ConfigError(f"{name} names a provider twice")
    return names


@dataclass(frozen=True)
class IdentityProvider:
    """One OpenID Connect provider of the third-party login."""

    name: str
    issuer: str
    client_id: str
    client_secret: str = field(repr=False)
    scopes: str = "openid profile email"

    @property
    def discovery_url(self) -> str:
        return f"{self.issuer}/.well-known/openid-configuration"

    @classmethod
    def from_env(cls, name: str, source: Mapping[str, Any]) -> IdentityProvider:
        """Read ``OIDC_<NAME>_ISSUER``, ``_CLIENT_ID``, ``_CLIENT_SECRET`` and ``_SCOPES``."""
        prefix = provider_env_prefix(name)

        def read(suffix: str, default: str | None = None) -> str:
            value = source.get(prefix + suffix, default)
            if value is None or not str(value).strip():
                raise ConfigError(f"{prefix}{suffix} is required for provider {name!r}")
            return str(value).strip()

        scopes = read("SCOPES", "openid profile email")
        if "openid" not in scopes.split():
            raise ConfigError(f"{prefix}SCOPES must include openid")
        return cls(
            name=name,
            issuer=_url(prefix + "ISSUER", read("ISSUER")),
            client_id=read("CLIENT_ID"),
            client_secret=read("CLIENT_SECRET"),
            scopes=scopes,
        )


def provider_env_prefix(name: str) -> str:
    """Return the prefix of a provider's variables: ``my-idp`` reads ``OIDC_MY_IDP_...``."""
    return "OIDC_" + name.upper().replace("-", "_") + "_"


def _setting(
    env: str, parse: Callable[[str, str], Any], default: Any = None, *, secret: bool = False
) -> Any:
    """Declare a dataclass field read from the environment variable ``env``."""
    return field(default=default, repr=not secret, metadata={"env": env, "parse": parse})


@dataclass(frozen=True)
class Settings:
    """Every setting of the service; one environment variable each (see README).

    Build it with ``Settings.load``, which also resolves the instance folder, the
    signing secret and key, and the token store's location: every field is then
    final, and the signing keys are loaded and checked.
    """

    signing_secret: str = _setting("SIGNING_SECRET", _secret, "", secret=True)
    signing_secret_previous: tuple[str, ...] = _setting(
        "SIGNING_SECRET_PREVIOUS", _previous_secrets, (), secret=True
    )
    signing_algorithm: str = _setting("SIGNING_ALGORITHM", _signing_algorithm, HS256)
    #: None with HS256; else the private key's file, generated in the instance folder if unset.
    signing_key_file: str | None = _setting("SIGNING_KEY_FILE", _absolute_path)
    signing_key_file_previous: tuple[str, ...] = _setting(
        "SIGNING_KEY_FILE_PREVIOUS", _absolute_paths, ()
    )
    admin_username: str = _setting("ADMIN_USERNAME", _admin_username, "admin")
    access_token_lifetime: int = _setting("ACCESS_TOKEN_LIFETIME", _int_between(1, 86_400), 60)
    clock_skew: int = _setting("CLOCK_SKEW", _int_between(0, 300), DEFAULT_CLOCK_SKEW)
    #: Loopback: the open login (no USERS_FILE) mints admin tokens; 0.0.0.0 in containers.
    host: str = _setting("HOST", _host, "127.0.0.1")
    port: int = _setting("PORT", _int_between(1, 65_535), 8080)
    token_store_url: str = _setting("TOKEN_STORE_URL", _non_empty, "")
    instance_path: str = _setting("INSTANCE_PATH", _absolute_path, DEFAULT_INSTANCE_PATH)
    #: The reverse proxies whose X-Forwarded-* are believed (app/proxy.py); (): none.
    trusted_proxies: tuple[IPNetwork, ...] = _setting("TRUSTED_PROXIES", _networks, ())
    #: Whether a trusted proxy's X-Forwarded-Prefix moves the app under a path.
    trusted_proxy_prefix: bool = _setting("TRUSTED_PROXY_PREFIX", _boolean, False)
    log_level: str = _setting("LOG_LEVEL", _log_level, "INFO")
    log_format: str = _setting("LOG_FORMAT", _one_of("json", "text"), "json")
    metrics: bool = _setting("METRICS", _boolean, True)
    #: The networks GET /metrics answers; anyone else gets 404. (): nobody.
    metrics_allow: tuple[IPNetwork, ...] = _setting(
        "METRICS_ALLOW", _networks, _networks("METRICS_ALLOW", DEFAULT_METRICS_ALLOW)
    )
    web_concurrency: int | None = _setting("WEB_CONCURRENCY", _int_between(1, 64))
    #: normal: revokes on disk before 204, logins survive any process crash; strict: all on disk.
    store_durability: str = _setting(
        "TOKEN_STORE_DURABILITY", _one_of("normal", "strict"), "normal"
    )
    store_timeout: float = _setting("TOKEN_STORE_TIMEOUT", _seconds_between(0.05, 60), 2.0)
    #: None: the same as TOKEN_STORE_TIMEOUT.
    store_connect_timeout: float | None = _setting(
        "TOKEN_STORE_CONNECT_TIMEOUT", _seconds_between(0.05, 60)
    )
    auth_cookie_name: str = _setting("AUTH_COOKIE_NAME", _cookie_name, "jwt")
    auth_cookie_secure: bool = _setting("AUTH_COOKIE_SECURE", _boolean, True)
    cookie_token_lifetime: int = _setting(
        "COOKIE_TOKEN_LIFETIME", _int_between(60, 2_592_000), 3600
    )
    #: Read as names from OIDC_PROVIDERS, then completed from OIDC_<NAME>_* variables.
    identity_providers: tuple[IdentityProvider, ...] = _setting(
        "OIDC_PROVIDERS", _provider_names, ()
    )
    login_redirect_url: str = _setting("LOGIN_REDIRECT_URL", _redirect_target, "/api/v1/me")
    public_url: str | None = _setting("PUBLIC_URL", _url)
    refresh_token_rotation: bool = _setting("REFRESH_TOKEN_ROTATION", _boolean, False)
    refresh_token_reuse_grace: float = _setting(
        "REFRESH_TOKEN_REUSE_GRACE", _seconds_between(0, MAX_REUSE_GRACE), 0.0
    )
    #: 0: no limit.
    refresh_tokens_per_user: int = _setting(
        "REFRESH_TOKENS_PER_USER", _int_between(0, MAX_TOKENS_PER_USER), 0
    )
    #: None: valid until revoked.
    refresh_token_lifetime: int | None = _setting(
        "REFRESH_TOKEN_LIFETIME", _int_between(60, MAX_REFRESH_TOKEN_LIFETIME)
    )
    #: Limits per client address on /login and on /token, shortest window first; (): off.
    rate_limit_auth: tuple[RateLimitItem, ...] = _setting(
        "RATE_LIMIT_AUTH", _rate_limits, _rate_limits("RATE_LIMIT_AUTH", DEFAULT_RATE_LIMIT_AUTH)
    )
    rate_limit_exempt: tuple[IPNetwork, ...] = _setting(
        "RATE_LIMIT_EXEMPT",
        _networks,
        _networks("RATE_LIMIT_EXEMPT", DEFAULT_RATE_LIMIT_EXEMPT),
    )
    #: None: SPEC.md's open login (no password checked); else the user directory's file.
    users_file: str | None = _setting("USERS_FILE", _users_file)
    #: Failed password checks per username (with USERS_FILE), shortest window first; (): off.
    login_failure_limit: tuple[RateLimitItem, ...] = _setting(
        "LOGIN_FAILURE_LIMIT",
        _rate_limits,
        _rate_limits("LOGIN_FAILURE_LIMIT", DEFAULT_LOGIN_FAILURE_LIMIT),
    )

    @classmethod
    def load(
        cls,
        overrides: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Settings:
        """Read every setting from ``environ`` (default: the process's), then ``overrides``.

        Also creates the instance folder if it is missing, generates the signing
        secret once if none is set, and checks the token store's location, so that
        any problem is one ConfigError here rather than a traceback in each worker.
        """
        source: dict[str, Any] = dict(os.environ if environ is None else environ)
        source.update(overrides or {})
        if "TRUSTED_PROXY_HOPS" in source:  # an old config must fail, not trust the wrong peers
            raise ConfigError(
                "TRUSTED_PROXY_HOPS is gone: set TRUSTED_PROXIES to the proxy's addresses"
                " instead (e.g. TRUSTED_PROXIES=127.0.0.1/32,::1 for nginx on this host)"
            )
        known = {setting.metadata["env"] for setting in fields(cls)}
        unknown = {
            key
            for key in (overrides or {})
            if key not in known and not PROVIDER_SETTING.fullmatch(key)
        }
        if unknown:
            raise ConfigError(f"unknown settings: {', '.join(sorted(unknown))}")
        values: dict[str, Any] = {}
        for setting in fields(cls):
            env = setting.metadata["env"]
            raw = source.get(env)
            if raw is not None:
                values[setting.name] = setting.metadata["parse"](env, str(raw))
        if values.get("refresh_token_reuse_grace") and not values.get("refresh_token_rotation"):
            raise ConfigError("REFRESH_TOKEN_REUSE_GRACE needs REFRESH_TOKEN_ROTATION=true")
        values["identity_providers"] = tuple(
            IdentityProvider.from_env(name, source) for name in values.get("identity_providers", ())
        )
        instance_path = _instance_folder(values.get("instance_path", DEFAULT_INSTANCE_PATH))
        values["instance_path"] = instance_path
        store_url = values.get("token_store_url") or "sqlite:///" + os.path.join(
            instance_path, SQLITE_FILE_NAME
        )
        values["token_store_url"] = _checked_store_url(store_url)
        values["signing_secret"] = values.get("signing_secret") or load_or_create_secret(
            instance_path
        )
        algorithm = values.get("signing_algorithm", HS256)
        if algorithm == HS256:
            for name in ("signing_key_file", "signing_key_file_previous"):
                if values.get(name):
                    raise ConfigError(
                        f"{name.upper()} is for SIGNING_ALGORITHM=EdDSA or ES256 (it is HS256)"
                    )
        elif not values.get("signing_key_file"):
            values["signing_key_file"] = load_or_create_key_file(instance_path, algorithm)
        if values.get("users_file"):
            _check_users_file(values["users_file"])
        settings = cls(**values)
        settings.signing_keys  # noqa: B018 (loads and checks every key now, once)
        return settings

    @functools.cached_property
    def signing_keys(self) -> KeyRing:
        """Return the keys that sign and verify tokens, loaded and checked once."""
        generated = self.signing_key_file == _generated_key_file(
            self.instance_path, self.signing_algorithm
        )
        try:
            return load_key_ring(
                self.signing_secret,
                self.signing_algorithm,
                self.signing_secret_previous,
                self.signing_key_file,
                self.signing_key_file_previous,
                key_file_name="the generated key" if generated else "SIGNING_KEY_FILE",
            )
        except KeyFileError as error:
            raise ConfigError(str(error)) from None

    def identity_provider(self, name: str) -> IdentityProvider | None:
        """Return the configured provider called ``name``, or None."""
        return next((item for item in self.identity_providers if item.name == name), None)


def current_settings() -> Settings:
    """Return the settings of the app handling the current request or command."""
    settings: Settings = current_app.config["SETTINGS"]  # put there by create_app
    return settings


def _instance_folder(path: str) -> str:
    """Return the instance folder, created (mode 0700) if it is missing; refuse a non-folder."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"INSTANCE_PATH {path} exists and is not a folder") from None
    except OSError as error:
        raise ConfigError(f"INSTANCE_PATH {path} cannot be created: {error.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"INSTANCE_PATH {path} is not writable by this user")
    return path


def _checked_store_url(url: str) -> str:
    """Return ``url`` if a store backend can use it; refuse it in one line otherwise."""
    if url.startswith("sqlite:///"):
        _check_sqlite_path(url[len("sqlite:///") :])
    elif url.startswith(("redis://", "rediss://", "unix://")):
        _check_redis_url(url)
    else:
        raise ConfigError(
            "TOKEN_STORE_URL must start with sqlite:///, redis://, rediss:// or unix://"
        )
    return url


def _check_sqlite_path(path: str) -> None:
    """Refuse a SQLite location the workers could not open: no folder is created for it."""
    if path in {"", ":memory:"}:
        raise ConfigError("TOKEN_STORE_URL needs a file path: sqlite:///<path>")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        problem = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise ConfigError(f"TOKEN_STORE_URL: {folder} {problem}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"TOKEN_STORE_URL: the folder {folder} is not writable by this user")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return  # created by the first worker that opens it
    if not stat.S_ISREG(mode):
        raise ConfigError(f"TOKEN_STORE_URL: {path} is not a regular file")
    try:  # read-only, so that nothing is created or changed here
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as database:
            database.execute("PRAGMA schema_version").fetchone()
    except sqlite3.Error as error:
        raise ConfigError(f"TOKEN_STORE_URL: {path} is not a usable SQLite file: {error}") from None


def _check_redis_url(url: str) -> None:
    """Refuse a Redis URL that redis-py cannot use (bad port, non-numeric database)."""
    from redis.connection import parse_url  # only deployments on Redis need redis-py

    try:
        parse_url(url)
        database = urlsplit(url).path.strip("/")
        if url.startswith(("redis://", "rediss://")) and database and not database.isdigit():
            raise ValueError("the database must be a number")
    except ValueError:  # redis-py's message may quote part of the password: not shown
        raise ConfigError(
            "TOKEN_STORE_URL is not a usable Redis URL: check the host, the port, the database"
            " number, and that a password with / : @ is percent-encoded"
        ) from None


def _check_users_file(path: str) -> None:
    """Refuse a user directory the service could not read; a missing one is empty."""
    from app.users import UsersFileError, read_users_file  # argon2 only with a directory

    try:
        read_users_file(path)
    except FileNotFoundError:
        return  # `flask users add` creates it; until then every login is refused
    except UsersFileError as error:
        raise ConfigError(f"USERS_FILE {error}") from None


def load_or_create_secret(instance_path: str) -> str:
    """Return the secret kept in the instance folder, creating it once if it is missing.

    gunicorn's master creates it before forking (gunicorn.conf.py), so workers only
    read it. Processes that start at the same moment without a master (``flask``
    commands, several servers on one folder) race here, safely: exactly one
    candidate is written into place, whole, and every process reads that one
    (``app.keys.create_private_file``).
    """
    path = os.path.join(instance_path, SECRET_FILE_NAME)
    try:
        if not os.path.exists(path):
            _create_secret_file(path)
        with open(path, encoding="utf-8") as handle:
            secret = handle.read().strip()
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or type(error).__name__
        raise ConfigError(
            f"the signing secret {path} cannot be created or read: {reason}"
        ) from None
    return _secret(f"the secret in {path}", secret)


def _create_secret_file(path: str) -> None:
    # Another process may win the race: then every process uses its secret.
    create_private_file(path, (secrets.token_urlsafe(48) + "\n").encode())


def load_or_create_key_file(instance_path: str, algorithm: str) -> str:
    """Return the private key file kept in the instance folder, creating it once if missing.

    As for the secret (``load_or_create_secret``): gunicorn's master creates it
    before forking, and processes that start together agree on one key.
    """
    path = os.path.join(instance_path, KEY_FILE_NAMES[algorithm])  # EdDSA and ES256 only
    try:
        if not os.path.exists(path):
            create_private_file(path, new_private_key_pem(algorithm))
    except OSError as error:
        raise ConfigError(f"the signing key {path} cannot be created: {error.strerror}") from None
    return path


def _generated_key_file(instance_path: str, algorithm: str) -> str | None:
    name = KEY_FILE_NAMES.get(algorithm)
    return os.path.join(instance_path, name) if name else None
