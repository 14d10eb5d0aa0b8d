"""The settings of the app handling the current request or command."""

from __future__ import annotations

from flask import current_app

from app.config.settings import Settings


def current_settings() -> Settings:
    """Return the settings of the app handling the current request or command."""
    settings: Settings = current_app.config["SETTINGS"]  # put there by create_app
    return settings
