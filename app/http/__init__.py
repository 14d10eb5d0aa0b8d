"""app.http."""
