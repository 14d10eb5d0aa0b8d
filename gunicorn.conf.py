"""gunicorn's settings for ``gunicorn -c gunicorn.conf.py wsgi:app`` (what ``make run`` does)
from the repository's root: the package's own, app/serving/gunicorn_config.py, run afresh
each time gunicorn reads this file, as a HUP does."""

import runpy

globals().update(
    (name, value)
    for name, value in runpy.run_module("app.serving.gunicorn_config").items()
    if not name.startswith("__")
)
