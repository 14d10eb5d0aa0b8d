"""The ``token-service`` command that ``pip install .`` installs: the service's Flask CLI
(``token-service tokens list``, ``token-service users add NAME``...) from any folder, and
``token-service serve``, gunicorn with the service's settings."""

from __future__ import annotations

import os
import sys

import click
from flask import Flask
from flask.cli import FlaskGroup

from app import create_app
from app.config.parsers import ConfigError
from app.config.settings import Settings

#: What ``serve`` hands gunicorn: the package's settings module and WSGI application.
GUNICORN_CONFIG = "python:app.serving.gunicorn_config"
WSGI_APPLICATION = "app.serving.wsgi:app"

#: The settings the gunicorn master read and checked (app/serving/gunicorn_config.py),
#: which every worker it forks inherits and builds its app from: a worker never reads the
#: environment or CONFIG_FILE again, so it runs what the master checked, whatever was
#: edited since. None in a command.
checked_settings: Settings | None = None


def load_app() -> Flask:
    """Build the service from the master's checked settings (a gunicorn worker) or from the
    environment, or exit with its one-line error."""
    try:
        return create_app(settings=checked_settings)
    except ConfigError as error:  # one clear line, for commands as for gunicorn's workers
        sys.exit(f"configuration error: {error}")


@click.command(
    context_settings={"ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
@click.argument("gunicorn_options", nargs=-1, type=click.UNPROCESSED)
def serve(gunicorn_options: tuple[str, ...]) -> None:
    """Serve with gunicorn on HOST:PORT, with the service's gunicorn settings; any
    options are gunicorn's own (token-service serve --help lists them)."""
    # gunicorn replaces this process, so signals reach its master directly (a container's
    # stop, a service manager's), and its re-exec on USR2 finds its own command line.
    command = [sys.executable, "-m", "gunicorn", "-c", GUNICORN_CONFIG, *gunicorn_options]
    os.execv(sys.executable, [*command, WSGI_APPLICATION])  # noqa: S606 (no shell: a list)


def main() -> None:
    """Run the ``token-service`` command."""
    cli = FlaskGroup(
        name="token-service",
        help="The token service's commands: serve, and the operator commands.",
        create_app=load_app,
        # the settings come from the environment alone, never from a .env file in the folder
        load_dotenv=False,
        set_debug_flag=False,
    )
    cli.add_command(serve)
    cli.main(prog_name="token-service")
