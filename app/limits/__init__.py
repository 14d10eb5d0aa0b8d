"""app.limits."""
