"""app.backends.sqlite."""
