"""How the service runs from an installed package, in any folder: the WSGI application
gunicorn loads (``app.serving.wsgi``), gunicorn's settings (``app.serving.gunicorn_config``),
and the ``token-service`` command (``app.serving.command``)."""
