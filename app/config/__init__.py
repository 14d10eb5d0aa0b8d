"""app.config.settings."""
