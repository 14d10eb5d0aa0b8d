"""Session-less token authentication and role authorization service."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from flask import Flask

from app.cli import register_commands
from app.config import MAX_BODY_BYTES, Settings
from app.errors import register_error_handlers
from app.metrics import init_metrics, metrics_of
from app.proxy import wrap_forwarded_headers
from app.rate_limit import init_rate_limit
from app.request_log import RequestLog
from app.security_headers import init_security_headers
from app.store import init_store
from app.third_party_login import init_third_party_login
from app.users import init_user_directory
from app.views import register_blueprints


def create_app(overrides: Mapping[str, Any] | None = None) -> Flask:
    """Build the service from the environment, with optional overrides for tests."""
    settings = Settings.load(overrides)  # raises ConfigError on a bad value
    app = Flask(__name__, instance_path=settings.instance_path)
    configure(app, settings)
    init_store(app, settings)
    init_rate_limit(app, settings)
    init_user_directory(app, settings)
    init_third_party_login(app, settings)
    register_blueprints(app)
    register_error_handlers(app)
    register_commands(app)
    init_metrics(app, settings)
    init_security_headers(app)
    wrap_request_path(app, settings)
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


def wrap_request_path(app: Flask, settings: Settings) -> None:
    """Wrap the app in the request log (which feeds the metrics), then in the proxy headers."""
    metrics = metrics_of(app)
    # inside app.proxy: the request log shows the client address the app sees
    # wrapping wsgi_app is Flask's documented way to add middleware; mypy sees a method
    app.wsgi_app = RequestLog(  # type: ignore[method-assign]
        app.wsgi_app,
        text=settings.log_format == "text",
        observe=metrics.observe if metrics is not None else None,
    )
    app.wsgi_app = wrap_forwarded_headers(  # type: ignore[method-assign,assignment]
        app.wsgi_app, settings.trusted_proxies, settings.trusted_proxy_prefix
    )
