"""The settings: a typed parse of the environment and of CONFIG_FILE, validated once at start-up.

Nothing here touches a file but CONFIG_FILE (``app.config.config_file``), nor imports a
module above it (only the username rule, ``app.config.usernames``, below it):
``app.instance`` creates the instance folder, the
generated secret and key, and checks the paths the settings name; each feature builds
its own objects from the settings in its ``init_<feature>(app, settings)``.
"""

from __future__ import annotations

import functools
import os
import types
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from limits import RateLimitItem

from app.config import parsers as parse
from app.config.config_file import (
    CONFIG_FILE,
    ConfigFileValues,
    read_config_file,
    shown_key,
    url_password,
)
from app.config.names import PROVIDER_SETTING, resembled_setting
from app.config.parsers import ConfigError, IPNetwork, Parser
from app.config.store_url import POSTGRES_PREFIXES
from app.config.usernames import CLIENT_USERNAME_PREFIX

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
LogFormat = Literal["json", "text"]
StoreDurability = Literal["normal", "strict", "relaxed"]
SigningAlgorithm = Literal["HS256", "EdDSA", "ES256"]
#: Where a setting's value came from (``flask config show``).
Origin = Literal["environment", "file", "default", "override"]

HS256: Final = "HS256"
EDDSA: Final = "EdDSA"
ES256: Final = "ES256"
ALGORITHMS: tuple[SigningAlgorithm, ...] = (HS256, EDDSA, ES256)
LOG_LEVELS: tuple[LogLevel, ...] = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS: tuple[LogFormat, ...] = ("json", "text")
DURABILITIES: tuple[StoreDurability, ...] = ("normal", "strict", "relaxed")

#: Largest request body the service reads, in bytes (16 KiB; docs/api.md).
MAX_BODY_BYTES = 16 * 1024
#: Longest refresh-token lifetime, in seconds (ten years): a typo of a few digits is refused.
MAX_REFRESH_TOKEN_LIFETIME = 10 * 365 * 86_400
#: Longest grace for retrying a rotation with the retired token (Cognito's maximum too).
MAX_REUSE_GRACE = 60
#: Longest idle timeout of a session, in seconds (a year): a typo of a few digits is refused.
MAX_IDLE_TIMEOUT = 365 * 86_400
#: Longest wait of a worker between two reads of the users' cut-offs, in seconds.
MAX_SESSION_CUTOFF_REFRESH = 60
#: Most live refresh tokens one user may be allowed (the limit is checked at each login).
MAX_TOKENS_PER_USER = 1000
#: Seconds a token's ``iat`` (or ``nbf``) may lie in the future: hosts' clocks differ a little.
DEFAULT_CLOCK_SKEW = 30
#: Name of the generated secret's file in the instance folder.
SECRET_FILE_NAME = "signing_secret"  # noqa: S105 (a file name)
#: Name of the generated private key's file in the instance folder, per algorithm.
KEY_FILE_NAMES = {EDDSA: "signing_key_eddsa.pem", ES256: "signing_key_es256.pem"}
#: Name of the default SQLite file in the instance folder.
SQLITE_FILE_NAME = "refresh_tokens.sqlite3"
#: Per client address, on /login and on /token each (docs/rate-limits.md): a burst of a
#: page's calls passes, a runaway client is stopped within a second, and 600 users behind
#: one NAT can each refresh a 60-second access token every minute.
DEFAULT_RATE_LIMIT_AUTH = "20 per second; 600 per minute"
#: Addresses never limited: the host itself (a local proxy, probes, an operator's curl).
DEFAULT_RATE_LIMIT_EXEMPT = "127.0.0.0/8, ::1"
#: Failed password checks per username (docs/rate-limits.md), with USERS_FILE.
DEFAULT_LOGIN_FAILURE_LIMIT = "10 per minute"
#: Addresses that GET /metrics answers: the host itself (a local Prometheus or agent).
DEFAULT_METRICS_ALLOW = "127.0.0.0/8, ::1"
#: Where the instance folder is when INSTANCE_PATH is unset: ``instance/`` beside ``app/``.
DEFAULT_INSTANCE_PATH = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "instance"
)


@dataclass(frozen=True)
class IdentityProvider:
    """One OpenID Connect provider of the third-party login."""

    name: str
    issuer: str
    client_id: str
    client_secret: str = field(repr=False)
    scopes: str = "openid profile email"
    #: Values of the provider's ``groups`` claim that make its user an admin.
    admin_groups: tuple[str, ...] = ()
    #: The provider's ``sub`` values of admins.
    admin_subjects: tuple[str, ...] = ()
    #: Verified emails (compared in lowercase) of admins.
    admin_emails: tuple[str, ...] = ()

    @property
    def discovery_url(self) -> str:
        return f"{self.issuer}/.well-known/openid-configuration"

    @classmethod
    def from_env(cls, name: str, source: Mapping[str, Any]) -> IdentityProvider:
        """Read ``OIDC_<NAME>_ISSUER``, ``_CLIENT_ID``, ``_CLIENT_SECRET``, ``_SCOPES`` and the
        optional ``_ADMIN_GROUPS``, ``_ADMIN_SUBJECTS`` and ``_ADMIN_EMAILS``."""
        prefix = provider_env_prefix(name)

        def read(suffix: str, default: str | None = None) -> str:
            value = source.get(prefix + suffix, default)
            if value is None or not str(value).strip():
                raise ConfigError(f"{prefix}{suffix} is required for provider {name!r}")
            return str(value).strip()

        def listed(suffix: str) -> tuple[str, ...]:
            return parse.subjects(prefix + suffix, str(source.get(prefix + suffix, "")))

        scopes = read("SCOPES", "openid profile email")
        if "openid" not in scopes.split():
            raise ConfigError(f"{prefix}SCOPES must include openid")
        return cls(
            name=name,
            issuer=parse.url(prefix + "ISSUER", read("ISSUER")),
            client_id=read("CLIENT_ID"),
            client_secret=read("CLIENT_SECRET"),
            scopes=scopes,
            admin_groups=listed("ADMIN_GROUPS"),
            admin_subjects=listed("ADMIN_SUBJECTS"),
            admin_emails=tuple(email.lower() for email in listed("ADMIN_EMAILS")),
        )


def provider_env_prefix(name: str) -> str:
    """Return the prefix of a provider's variables: ``my-idp`` reads ``OIDC_MY_IDP_...``."""
    return "OIDC_" + name.upper().replace("-", "_") + "_"


T = TypeVar("T")


def setting(env: str, parser: Parser[T], default: T, *, secret: bool = False) -> T:
    """Declare a field read from the variable ``env`` by ``parser``, whose type is the field's."""
    value: T = field(
        default=default,
        repr=not secret,
        metadata={"env": env, "parse": parser, "secret": secret},
    )
    return value


def providers_setting(env: str) -> tuple[IdentityProvider, ...]:
    """Declare the providers' field: names read from ``env``, each completed by ``load``
    from its own ``OIDC_<NAME>_*`` variables (``IdentityProvider.from_env``)."""
    providers: tuple[IdentityProvider, ...] = field(
        default=(), metadata={"env": env, "parse": parse.provider_names}
    )
    return providers


@dataclass(frozen=True)
class Settings:
    """Every setting of the service; one environment variable each (docs/configuration.md).

    Build it with ``Settings.load``; ``app.instance.prepare_instance`` then fills in
    what lives in the instance folder (the secret or key file, the store's path).
    """

    #: None: every setting from the environment; else a TOML file of settings below it.
    config_file: str | None = setting(CONFIG_FILE, parse.absolute_path, None)
    #: "": generated once in the instance folder (app/instance.py).
    signing_secret: str = setting("SIGNING_SECRET", parse.secret, "", secret=True)
    signing_secret_previous: tuple[str, ...] = setting(
        "SIGNING_SECRET_PREVIOUS", parse.previous_secrets, (), secret=True
    )
    signing_algorithm: SigningAlgorithm = setting(
        "SIGNING_ALGORITHM", parse.choice(ALGORITHMS, verb="be", got=True), HS256
    )
    #: None with HS256; else the private key's file, generated in the instance folder if unset.
    signing_key_file: str | None = setting("SIGNING_KEY_FILE", parse.absolute_path, None)
    signing_key_file_previous: tuple[str, ...] = setting(
        "SIGNING_KEY_FILE_PREVIOUS", parse.absolute_paths, ()
    )
    admin_username: str = setting("ADMIN_USERNAME", parse.admin_username, "admin")
    access_token_lifetime: int = setting("ACCESS_TOKEN_LIFETIME", parse.int_between(1, 86_400), 60)
    clock_skew: int = setting("CLOCK_SKEW", parse.int_between(0, 300), DEFAULT_CLOCK_SKEW)
    #: Loopback: gunicorn has no header timeout; beyond it only with BEHIND_PROXY.
    host: str = setting("HOST", parse.host, "127.0.0.1")
    #: The operator's word that every client comes through a proxy that reads each
    #: request's headers itself (nginx, an ingress): needed to listen beyond loopback.
    behind_proxy: bool = setting("BEHIND_PROXY", parse.boolean, False)
    port: int = setting("PORT", parse.int_between(1, 65_535), 8080)
    #: "": the SQLite file in the instance folder (app/instance.py).
    token_store_url: str = setting("TOKEN_STORE_URL", parse.store_url, "")
    instance_path: str = setting("INSTANCE_PATH", parse.absolute_path, DEFAULT_INSTANCE_PATH)
    #: The reverse proxies whose X-Forwarded-* are believed (app/http/proxy.py); (): none.
    trusted_proxies: tuple[IPNetwork, ...] = setting("TRUSTED_PROXIES", parse.networks, ())
    #: Whether a trusted proxy's X-Forwarded-Prefix moves the app under a path.
    trusted_proxy_prefix: bool = setting("TRUSTED_PROXY_PREFIX", parse.boolean, False)
    log_level: LogLevel = setting("LOG_LEVEL", parse.choice(LOG_LEVELS, got=False), "INFO")
    log_format: LogFormat = setting("LOG_FORMAT", parse.choice(LOG_FORMATS), "json")
    metrics: bool = setting("METRICS", parse.boolean, True)
    #: The networks GET /metrics answers; anyone else gets 404. (): nobody.
    metrics_allow: tuple[IPNetwork, ...] = setting(
        "METRICS_ALLOW", parse.networks, parse.networks("METRICS_ALLOW", DEFAULT_METRICS_ALLOW)
    )
    web_concurrency: int | None = setting("WEB_CONCURRENCY", parse.int_between(1, 64), None)
    #: normal: revokes on disk before 204, logins survive any process crash; strict: all on disk.
    store_durability: StoreDurability = setting(
        "TOKEN_STORE_DURABILITY", parse.choice(DURABILITIES), "normal"
    )
    store_timeout: float = setting("TOKEN_STORE_TIMEOUT", parse.seconds_between(0.05, 60), 2.0)
    #: None: the same as TOKEN_STORE_TIMEOUT.
    store_connect_timeout: float | None = setting(
        "TOKEN_STORE_CONNECT_TIMEOUT", parse.seconds_between(0.05, 60), None
    )
    #: PostgreSQL: connections each worker process keeps open, and opens at most.
    store_pool_min: int = setting("TOKEN_STORE_POOL_MIN", parse.int_between(0, 64), 1)
    store_pool_max: int = setting("TOKEN_STORE_POOL_MAX", parse.int_between(1, 64), 4)
    auth_cookie_name: str = setting("AUTH_COOKIE_NAME", parse.cookie_name, "jwt")
    auth_cookie_secure: bool = setting("AUTH_COOKIE_SECURE", parse.boolean, True)
    cookie_token_lifetime: int = setting(
        "COOKIE_TOKEN_LIFETIME", parse.int_between(60, 2_592_000), 3600
    )
    #: Whether GET /auth/check (the nginx gateway) also accepts the cookie token.
    auth_check_cookie: bool = setting("AUTH_CHECK_COOKIE", parse.boolean, False)
    #: Seconds nginx may keep a Bearer token's 200 from GET /auth/check (never past exp); 0: none.
    auth_check_cache_seconds: int = setting("AUTH_CHECK_CACHE_SECONDS", parse.int_between(0, 60), 0)
    #: None: GET /auth/check judges by its ?role= (as ever); else the gateway's rules file.
    access_rules_file: str | None = setting("ACCESS_RULES_FILE", parse.absolute_path, None)
    #: Read as names from OIDC_PROVIDERS, then completed from OIDC_<NAME>_* variables.
    identity_providers: tuple[IdentityProvider, ...] = providers_setting("OIDC_PROVIDERS")
    login_redirect_url: str = setting("LOGIN_REDIRECT_URL", parse.redirect_target, "/api/v1/me")
    #: Hosts a login may send the browser back to (``?rd=``); (): LOGIN_REDIRECT_URL only.
    login_return_domains: tuple[str, ...] = setting(
        "LOGIN_RETURN_DOMAINS", parse.return_domains, ()
    )
    public_url: str | None = setting("PUBLIC_URL", parse.url, None)
    refresh_token_rotation: bool = setting("REFRESH_TOKEN_ROTATION", parse.boolean, False)
    refresh_token_reuse_grace: float = setting(
        "REFRESH_TOKEN_REUSE_GRACE", parse.seconds_between(0, MAX_REUSE_GRACE), 0.0
    )
    #: 0: no limit.
    refresh_tokens_per_user: int = setting(
        "REFRESH_TOKENS_PER_USER", parse.int_between(0, MAX_TOKENS_PER_USER), 0
    )
    #: None: valid until revoked.
    refresh_token_lifetime: int | None = setting(
        "REFRESH_TOKEN_LIFETIME", parse.int_between(60, MAX_REFRESH_TOKEN_LIFETIME), None
    )
    #: Seconds a session may go unused before POST /token refuses it; None: no limit.
    refresh_token_idle_timeout: int | None = setting(
        "REFRESH_TOKEN_IDLE_TIMEOUT", parse.int_between(60, MAX_IDLE_TIMEOUT), None
    )
    #: Seconds between a worker's reads of the users' cut-offs (log out everywhere): the
    #: longest an access token outlives its user's logout everywhere on another host.
    session_cutoff_refresh: int = setting(
        "SESSION_CUTOFF_REFRESH", parse.int_between(1, MAX_SESSION_CUTOFF_REFRESH), 5
    )
    #: Limits per client address on /login and on /token, shortest window first; (): off.
    rate_limit_auth: tuple[RateLimitItem, ...] = setting(
        "RATE_LIMIT_AUTH",
        parse.rate_limits,
        parse.rate_limits("RATE_LIMIT_AUTH", DEFAULT_RATE_LIMIT_AUTH),
    )
    rate_limit_exempt: tuple[IPNetwork, ...] = setting(
        "RATE_LIMIT_EXEMPT",
        parse.networks,
        parse.networks("RATE_LIMIT_EXEMPT", DEFAULT_RATE_LIMIT_EXEMPT),
    )
    #: None: SPEC.md's open login (no password checked); else the user directory's file.
    users_file: str | None = setting("USERS_FILE", parse.absolute_path, None)
    #: Whether the open login (no USERS_FILE) may be reached through a proxy or a network.
    open_login: bool = setting("OPEN_LOGIN", parse.boolean, False)
    #: Failed password checks per username (with USERS_FILE), shortest window first; (): off.
    login_failure_limit: tuple[RateLimitItem, ...] = setting(
        "LOGIN_FAILURE_LIMIT",
        parse.rate_limits,
        parse.rate_limits("LOGIN_FAILURE_LIMIT", DEFAULT_LOGIN_FAILURE_LIMIT),
    )

    #: None: tokens carry SPEC.md's claims only; else their ``iss`` (docs/oauth.md).
    token_issuer: str | None = setting("TOKEN_ISSUER", parse.issuer, None)
    #: The ``aud`` of access tokens, and the audiences a token must name one of; (): none.
    token_audience: tuple[str, ...] = setting("TOKEN_AUDIENCE", parse.audiences, ())
    #: None: no registered clients and no /oauth/ endpoints; else the clients' file.
    clients_file: str | None = setting("CLIENTS_FILE", parse.absolute_path, None)

    @classmethod
    def load(
        cls,
        overrides: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Settings:
        """Read every setting from CONFIG_FILE, then ``environ`` (default: the process's), then
        ``overrides``: each wins over the one before it.

        Raise ConfigError, in one line, on the first bad value, an unknown override or
        a variable or file key that looks like a misspelled setting (``app.config.names``).
        """
        source, origins, config_file = cls.gather(overrides, environ)
        values: dict[str, Any] = {}
        for setting in fields(cls):
            env = setting.metadata["env"]
            raw = source.get(env)
            if raw is not None:
                try:
                    values[setting.name] = setting.metadata["parse"](env, str(raw))
                except ConfigError as error:
                    if config_file is None or origins[env] != "file":
                        raise
                    raise ConfigError(f"{CONFIG_FILE} {config_file.path}: {error}") from None
        if values.get("store_pool_min", 1) > values.get("store_pool_max", 4):
            raise ConfigError("TOKEN_STORE_POOL_MIN must not be more than TOKEN_STORE_POOL_MAX")
        if values.get("store_durability") == "relaxed" and not str(
            values.get("token_store_url", "")
        ).startswith(POSTGRES_PREFIXES):
            raise ConfigError(
                "TOKEN_STORE_DURABILITY=relaxed is for a PostgreSQL store (TOKEN_STORE_URL"
                "=postgresql://...); SQLite's normal already relaxes logins"
            )
        if values.get("refresh_token_reuse_grace") and not values.get("refresh_token_rotation"):
            raise ConfigError("REFRESH_TOKEN_REUSE_GRACE needs REFRESH_TOKEN_ROTATION=true")
        values["identity_providers"] = tuple(
            IdentityProvider.from_env(name, source) for name in values.get("identity_providers", ())
        )
        if values.get("signing_algorithm", HS256) == HS256:
            for name in ("signing_key_file", "signing_key_file_previous"):
                if values.get(name):
                    raise ConfigError(
                        f"{name.upper()} is for SIGNING_ALGORITHM=EdDSA or ES256 (it is HS256)"
                    )
        if bool(values.get("token_issuer")) != bool(values.get("token_audience")):
            raise ConfigError(
                "TOKEN_ISSUER and TOKEN_AUDIENCE go together: set both (tokens then carry"
                " iss and aud, and verification requires them) or neither"
            )
        if values.get("clients_file") and str(values.get("admin_username", "admin")).startswith(
            CLIENT_USERNAME_PREFIX
        ):
            raise ConfigError(
                f"ADMIN_USERNAME must not start with {CLIENT_USERNAME_PREFIX!r} with CLIENTS_FILE:"
                " those names are the registered clients'"
            )
        values.setdefault("instance_path", DEFAULT_INSTANCE_PATH)  # read now: tests change it
        settings = cls(**values)
        settings.check_reach()
        return settings

    @classmethod
    def gather(
        cls,
        overrides: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> tuple[dict[str, Any], dict[str, Origin], ConfigFileValues | None]:
        """Return every setting's text, where each came from, and CONFIG_FILE's values.

        Settings left at their defaults are in neither mapping.
        """
        environ = os.environ if environ is None else environ
        overrides = overrides or {}
        if "TRUSTED_PROXY_HOPS" in {**environ, **overrides}:  # an old config must fail
            raise ConfigError(
                "TRUSTED_PROXY_HOPS is gone: set TRUSTED_PROXIES to the proxy's addresses"
                " instead (e.g. TRUSTED_PROXIES=127.0.0.1/32,::1 for nginx on this host)"
            )
        known = setting_names()
        unknown = {
            key for key in overrides if key not in known and not PROVIDER_SETTING.fullmatch(key)
        }
        if unknown:
            raise ConfigError(f"unknown settings: {', '.join(sorted(unknown))}")
        for name in sorted(environ):
            if resembled := resembled_setting(name, known):
                raise ConfigError(
                    f"{name} is not a setting: did you mean {resembled}? (unset or rename it)"
                )
        path = overrides.get(CONFIG_FILE, environ.get(CONFIG_FILE))
        config_file = read_settings_file(str(path)) if path else None
        origins: dict[str, Origin] = {}
        source: dict[str, Any] = {}
        layers: list[tuple[Origin, Mapping[str, Any]]] = [
            ("file", config_file.values if config_file else {}),
            ("environment", environ),
            ("override", overrides),
        ]
        for origin, layer in layers:
            for name, value in layer.items():
                if name in known or PROVIDER_SETTING.fullmatch(name):
                    source[name] = value
                    origins[name] = origin
        return source, origins, config_file

    def check_reach(self) -> None:
        """Refuse a bind or an open login that clients beyond this host could abuse."""
        if not parse.is_loopback_host(self.host) and not self.behind_proxy:
            raise ConfigError(
                f"HOST={self.host} listens beyond loopback, but gunicorn has no header"
                " timeout (a few clients that send their headers slowly stall it): put a"
                " proxy that reads the headers itself in front (nginx, an ingress) and set"
                " BEHIND_PROXY=true, or keep HOST=127.0.0.1"
            )
        if self.users_file is not None or self.open_login:
            return
        if self.trusted_proxies or self.behind_proxy:
            reach = "TRUSTED_PROXIES is set" if self.trusted_proxies else "BEHIND_PROXY is true"
            raise ConfigError(
                f"{reach}, but USERS_FILE is not set: anyone who reaches the proxy can log in"
                " as any user, admin included; set USERS_FILE (then flask users add NAME),"
                " or OPEN_LOGIN=true to allow that open login"
            )

    def identity_provider(self, name: str) -> IdentityProvider | None:
        """Return the configured provider called ``name``, or None."""
        return next((item for item in self.identity_providers if item.name == name), None)


@functools.cache
def setting_names() -> frozenset[str]:
    """Return every setting's variable name (a provider's OIDC_<NAME>_* aside)."""
    return frozenset(setting.metadata["env"] for setting in fields(Settings))


@functools.cache
def toml_kinds() -> dict[str, frozenset[type]]:
    """Return the TOML types each setting takes in CONFIG_FILE: a string always, and the
    natural type of a number, a yes or no, or a list."""
    hints = get_type_hints(Settings)
    return {setting.metadata["env"]: _kinds(hints[setting.name]) for setting in fields(Settings)}


def _kinds(hint: Any) -> frozenset[type]:
    if get_origin(hint) in (Union, types.UnionType):
        return frozenset().union(*(_kinds(arg) for arg in get_args(hint) if arg is not type(None)))
    if hint is bool:
        return frozenset({str, bool})
    if hint is int:
        return frozenset({str, int})
    if hint is float:
        return frozenset({str, int, float})
    if get_origin(hint) is tuple:
        return frozenset({str, list})
    return frozenset({str})


def is_secret(name: str, value: str) -> bool:
    """Return whether the setting ``name`` holding ``value`` is a secret to keep hidden."""
    if name.startswith("OIDC_") and name.endswith("_CLIENT_SECRET"):
        return True
    if name == "TOKEN_STORE_URL":
        return url_password(value) is not None
    return name in SECRET_SETTINGS


def read_settings_file(path: str) -> ConfigFileValues:
    """Read CONFIG_FILE at ``path``; its keys must be settings' names, spelled exactly."""
    known = setting_names()
    kinds = toml_kinds()

    def kinds_of(key: str) -> frozenset[type] | None:
        if key == CONFIG_FILE:
            raise ConfigError(
                f"{CONFIG_FILE} {path}: {CONFIG_FILE} is read from the environment only"
            )
        if key in kinds:
            return kinds[key]
        if PROVIDER_SETTING.fullmatch(key):
            return frozenset({str})
        if resembled := resembled_setting(key, known):
            raise ConfigError(
                f"{CONFIG_FILE} {path}: {shown_key(key)} is not a setting:"
                f" did you mean {resembled}?"
            )
        return None

    return read_config_file(path, kinds_of, is_secret)


#: The settings whose values are secrets, always masked (a store URL's password too).
SECRET_SETTINGS = frozenset(
    setting.metadata["env"] for setting in fields(Settings) if setting.metadata.get("secret")
)
