"""Gunicorn settings: ``gunicorn -c gunicorn.conf.py wsgi:app`` (what ``make run`` does).

The settings are read and checked here, in the master, so a bad value stops
the service before any worker starts, with one clear line. This also creates the
instance folder and the generated signing secret before the workers fork.
"""

import multiprocessing
import sys

from app.config import ConfigError, Settings
from app.logging_config import logging_config

try:
    settings = Settings.load()
except ConfigError as error:
    sys.exit(f"configuration error: {error}")

bind = [
    f"[{settings.host}]:{settings.port}"
    if ":" in settings.host
    else f"{settings.host}:{settings.port}"
]
workers = settings.web_concurrency or min(2 * multiprocessing.cpu_count() + 1, 8)
worker_class = "sync"  # behind nginx, which buffers slow clients
timeout = 30
graceful_timeout = 20
keepalive = 5
# The service writes its own request log (app/request_log.py): gunicorn's is off.
accesslog = None
errorlog = "-"
loglevel = settings.log_level.lower()
# gunicorn's messages and the app's: one format (LOG_FORMAT), one redaction
logconfig_dict = logging_config(settings.log_format, settings.log_level)
# X-Forwarded-* are trusted by the app alone, through TRUSTED_PROXY_HOPS (ProxyFix);
# gunicorn would otherwise believe X-Forwarded-Proto from any loopback client.
forwarded_allow_ips = ""
# gunicorn's control socket is one fixed path per user; several instances would clash.
control_socket_disable = True
