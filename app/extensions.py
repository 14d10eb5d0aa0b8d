"""Every object the app carries, each under one key of ``app.extensions``, and the one
typed getter that reads it back.

``create_app`` runs each feature's ``init_<feature>(app, settings)``, which stores the
feature's object under its key here; code that serves a request or a command reads it
through the getter, for the app at hand (``current_app``). A feature that is off stores
None, or nothing at all (the third-party login, with no provider), and its getter
returns None.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flask import Flask, current_app

from app.config.clock import Clock

if TYPE_CHECKING:
    from app.auth.keys import KeyRing
    from app.auth.tokens import ExpectedClaims
    from app.auth.users import UserDirectory
    from app.backends.interface import Backend, RefreshTokenStore
    from app.config.settings import Settings
    from app.gateway.rules import AccessRulesFile
    from app.limits.address import RateLimiter
    from app.limits.login_failures import LoginFailureLimit
    from app.oauth.clients import ClientRegistry
    from app.observability.metrics import Metrics
    from app.oidc.flow import LoginFlow
    from app.sessions.cutoffs import CutoffCache

#: The one clock of tokens, stores and limits (app/config/clock.py).
CLOCK = "clock"
KEY_RING = "key_ring"
#: TOKEN_ISSUER and TOKEN_AUDIENCE, or None (``app.auth.tokens.ExpectedClaims``).
EXPECTED_CLAIMS = "expected_claims"
#: The backend: the token store and the rate limits' counters (``app.backends.open_backend``).
BACKEND = "backend"
TOKEN_STORE = "token_store"  # noqa: S105  # a key of app.extensions, no secret
RATE_LIMITER = "rate_limiter"
LOGIN_FAILURE_LIMIT = "login_failure_limit"
USER_DIRECTORY = "user_directory"
#: The registered clients of CLIENTS_FILE, and their failed secrets' limit.
CLIENT_REGISTRY = "client_registry"
CLIENT_FAILURE_LIMIT = "client_failure_limit"
METRICS = "metrics"
LOGIN_FLOW = "third_party_login"
#: Each worker's copy of the users' cut-offs (app/sessions/cutoffs.py).
CUTOFFS = "session_cutoffs"
#: The gateway's rules of ACCESS_RULES_FILE, or None (app/gateway/rules.py).
ACCESS_RULES = "access_rules"
#: The OpenAPI document's JSON, built on its first request.
OPENAPI_JSON = "openapi_json"


def current_settings() -> Settings:
    """Return the settings of the app handling the current request or command."""
    settings: Settings = current_app.config["SETTINGS"]  # put there by create_app
    return settings


def get_clock() -> Clock:
    """Return the current app's clock."""
    return clock_of(current_app)


def clock_of(app: Flask) -> Clock:
    """Return the clock of ``app``, which every feature of it reads."""
    clock: Clock = app.extensions[CLOCK]
    return clock


def get_key_ring() -> KeyRing:
    """Return the current app's key ring: the key that signs, and the ones that verify."""
    ring: KeyRing = current_app.extensions[KEY_RING]
    return ring


def get_expected_claims() -> ExpectedClaims | None:
    """Return the issuer and audiences the current app's access tokens carry, or None."""
    expected: ExpectedClaims | None = current_app.extensions[EXPECTED_CLAIMS]
    return expected


def backend_of(app: Flask) -> Backend:
    """Return the backend of ``app``: its token store and its counters."""
    backend: Backend = app.extensions[BACKEND]
    return backend


def get_store() -> RefreshTokenStore:
    """Return the current app's refresh-token store."""
    store: RefreshTokenStore = current_app.extensions[TOKEN_STORE]
    return store


def store_of(app: Flask) -> RefreshTokenStore:
    """Return the refresh-token store of ``app``."""
    store: RefreshTokenStore = app.extensions[TOKEN_STORE]
    return store


def get_cutoffs() -> CutoffCache:
    """Return the current app's cut-off cache: who was logged out everywhere, and when."""
    cutoffs: CutoffCache = current_app.extensions[CUTOFFS]
    return cutoffs


def get_rate_limiter() -> RateLimiter | None:
    """Return the current app's rate limiter, or None when the limits are off."""
    limiter: RateLimiter | None = current_app.extensions[RATE_LIMITER]
    return limiter


def get_login_failure_limit() -> LoginFailureLimit | None:
    """Return the current app's per-username limit, or None when it does not apply."""
    limit: LoginFailureLimit | None = current_app.extensions[LOGIN_FAILURE_LIMIT]
    return limit


def get_user_directory() -> UserDirectory | None:
    """Return the current app's user directory, or None: the open login."""
    directory: UserDirectory | None = current_app.extensions[USER_DIRECTORY]
    return directory


def get_client_registry() -> ClientRegistry | None:
    """Return the current app's registered clients, or None without CLIENTS_FILE."""
    registry: ClientRegistry | None = current_app.extensions[CLIENT_REGISTRY]
    return registry


def get_client_failure_limit() -> LoginFailureLimit | None:
    """Return the current app's limit of failed secrets per client id, or None."""
    limit: LoginFailureLimit | None = current_app.extensions[CLIENT_FAILURE_LIMIT]
    return limit


def get_login_flow() -> LoginFlow | None:
    """Return the current app's third-party login flow, or None with no provider."""
    flow: LoginFlow | None = current_app.extensions.get(LOGIN_FLOW)
    return flow


def metrics_of(app: Flask) -> Metrics | None:
    """Return the metrics of ``app``, or None when METRICS is off."""
    metrics: Metrics | None = app.extensions.get(METRICS)
    return metrics


def get_access_rules() -> AccessRulesFile | None:
    """Return the current app's gateway rules, or None without ACCESS_RULES_FILE."""
    rules: AccessRulesFile | None = current_app.extensions[ACCESS_RULES]
    return rules
