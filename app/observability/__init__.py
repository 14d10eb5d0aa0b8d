"""app.observability."""
