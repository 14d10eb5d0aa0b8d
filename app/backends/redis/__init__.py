"""app.backends.redis."""
