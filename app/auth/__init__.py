"""app.auth."""
