"""app.compat."""
