"""app.backends.postgres."""
