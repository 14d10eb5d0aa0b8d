"""Session-less token authentication and role authorization service.

``create_app`` is the whole map. Each feature has one ``init_<feature>(app, settings)``,
called from there and nowhere else, which puts the feature's object in ``app.extensions``
under its key in ``app/extensions.py``; the getter there returns it, typed, for the app at
hand (``current_app``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from flask import Flask

from app.auth.keys import settings_key_ring
from app.auth.tokens import ExpectedClaims
from app.auth.users import UserDirectory
from app.backends import init_store
from app.cli import register_commands
from app.compat.werkzeug import ServiceRequest
from app.config.clock import SYSTEM_CLOCK, Clock
from app.config.settings import MAX_BODY_BYTES, Settings
from app.extensions import (
    ACCESS_RULES,
    CLOCK,
    CUTOFFS,
    EXPECTED_CLAIMS,
    KEY_RING,
    USER_DIRECTORY,
    clock_of,
    metrics_of,
)
from app.gateway.rules import AccessRulesFile
from app.http.errors import register_error_handlers
from app.http.proxy import wrap_forwarded_headers
from app.http.request_log import RequestLog
from app.instance import prepare_instance
from app.limits.address import init_rate_limit
from app.oauth import init_oauth
from app.observability.metrics import init_metrics
from app.oidc import init_third_party_login
from app.sessions import init_sessions
from app.sessions.ending import log_out_changed_users
from app.views import register_blueprints


def create_app(
    overrides: Mapping[str, Any] | None = None,
    clock: Clock | None = None,
    settings: Settings | None = None,
) -> Flask:
    """Build the service from the environment, with optional overrides for tests, on the
    host's clock or on ``clock`` (a test's, which moves time for every feature at once);
    or from ``settings`` read and checked already (a gunicorn worker's, its master's)."""
    if settings is None:
        settings = Settings.load(overrides)  # raises ConfigError on a bad value
    settings = prepare_instance(settings)  # the instance folder, the generated secret or key
    app = Flask(__name__, instance_path=settings.instance_path)
    app.request_class = ServiceRequest  # a query that is not UTF-8 is a 400, not a 500
    app.extensions[CLOCK] = SYSTEM_CLOCK if clock is None else clock
    configure(app, settings)
    init_keys(app, settings)
    init_store(app, settings)
    init_sessions(app, settings)
    init_rate_limit(app, settings)
    init_user_directory(app, settings)
    init_access_rules(app, settings)
    init_metrics(app, settings)
    init_request_log(app, settings)
    init_proxy_headers(app, settings)
    init_third_party_login(app, settings)
    init_oauth(app, settings)
    register_blueprints(app)
    register_error_handlers(app)
    register_commands(app)
    return app


def configure(app: Flask, settings: Settings) -> None:
    """Apply the settings to Flask and its logger."""
    app.config.update(
        SETTINGS=settings,
        MAX_CONTENT_LENGTH=MAX_BODY_BYTES,
        # OPTIONS gets the JSON 405 with Allow, not an empty text/html 200 (no CORS here)
        PROVIDE_AUTOMATIC_OPTIONS=False,
    )
    # /token//x is a token path like any other, not a redirect to a merged path
    app.url_map.merge_slashes = False
    app.json.sort_keys = False  # type: ignore[attr-defined]  # the default provider has it
    app.logger.setLevel(getattr(logging, settings.log_level))


def init_keys(app: Flask, settings: Settings) -> None:
    """Load and check every key once, and attach the ring to ``app``, with the issuer and
    audiences its access tokens carry (None without TOKEN_ISSUER)."""
    app.extensions[KEY_RING] = settings_key_ring(settings)
    expected = None
    if settings.token_issuer is not None:
        expected = ExpectedClaims(settings.token_issuer, settings.token_audience)
    app.extensions[EXPECTED_CLAIMS] = expected


def init_user_directory(app: Flask, settings: Settings) -> None:
    """Attach the user directory of USERS_FILE to ``app``, or None when it is unset; the
    cut-off cache looks at the file before each of its reads."""
    directory = None
    if settings.users_file is not None:
        directory = UserDirectory(
            settings.users_file, clock=clock_of(app), on_change=log_out_changed_users(app)
        )
        app.extensions[CUTOFFS].before_refresh = directory.look
    app.extensions[USER_DIRECTORY] = directory


def init_access_rules(app: Flask, settings: Settings) -> None:
    """Attach the gateway's rules of ACCESS_RULES_FILE to ``app``, or None when it is unset;
    a changed file is read again within a second, and a bad one logged and not used."""
    rules = None
    if settings.access_rules_file is not None:
        rules = AccessRulesFile(
            settings.access_rules_file,
            monotonic=clock_of(app).monotonic,
            on_error=lambda problem: app.logger.error(
                "%s: the rules in force stay until the file is fixed", problem
            ),
        )
    app.extensions[ACCESS_RULES] = rules


def init_request_log(app: Flask, settings: Settings) -> None:
    """Wrap the app in the request log, which feeds the metrics and adds the security
    headers to every answer."""
    metrics = metrics_of(app)
    # wrapping wsgi_app is Flask's documented way to add middleware; mypy sees a method
    app.wsgi_app = RequestLog(  # type: ignore[method-assign]
        app.wsgi_app,
        text=settings.log_format == "text",
        observe=metrics.observe if metrics is not None else None,
    )


def init_proxy_headers(app: Flask, settings: Settings) -> None:
    """Wrap the app (the request log included, so that it logs the client address the app
    sees) in the X-Forwarded-* handling of TRUSTED_PROXIES."""
    app.wsgi_app = wrap_forwarded_headers(  # type: ignore[method-assign,assignment]
        app.wsgi_app, settings.trusted_proxies, settings.trusted_proxy_prefix
    )
