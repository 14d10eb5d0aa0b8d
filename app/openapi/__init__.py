"""app.openapi.document."""
