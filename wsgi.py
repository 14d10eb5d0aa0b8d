"""The WSGI entry point gunicorn loads: ``gunicorn -c gunicorn.conf.py wsgi:app``."""

import sys

from app import create_app
from app.config.parsers import ConfigError

try:
    app = create_app()
except ConfigError as error:  # one clear line, for `flask` commands as for gunicorn workers
    sys.exit(f"configuration error: {error}")
