"""The WSGI application gunicorn loads: ``app.serving.wsgi:app``."""

from __future__ import annotations

from app.serving.command import load_app

app = load_app()
