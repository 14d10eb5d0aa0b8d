"""The WSGI entry point gunicorn loads from the repository's root: ``gunicorn -c
gunicorn.conf.py wsgi:app``, and ``flask --app wsgi``. The package's own is
app/serving/wsgi.py."""

from app.serving.wsgi import app

__all__ = ["app"]
