"""What the service tells its operators: the log's format, what it never shows, and the
metrics."""
