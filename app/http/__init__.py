"""The HTTP layer around the views: ``requires_roles`` and the other guards, request
bodies, error answers, and the WSGI middleware (proxy headers, the request log)."""
