"""Where the service relies on what a library does not promise, each reach in one place.

A reach stays only where ``make bench`` can see its gain (docs/performance.md has the
figures, and the reaches dropped for a gain too small to resolve), or where no public API
does what the service needs.

One module per library. tests/unit/test_compat.py checks every assumption against the
installed library, and that its version is the one checked (each module's
``CHECKED_VERSION``): an upgrade that breaks one fails there, before it reaches a server.

- PyJWT: an HS256 secret checked once rather than on every signature check; tokens
  signed without ``jwt.encode``, byte for byte what it writes.
- Authlib: the session keys under which its Flask client keeps pending logins, read
  to bound the login-state cookie.
- gunicorn: the gthread worker's accept switch, wrapped so that a stopping worker
  refuses new connections at once.
- prometheus_client: its value class, switched to in-memory counting in a worker whose
  metric files the disk cannot give (docs/operations.md, "A full disk"); the exited
  workers' files, merged into one file per kind in its own format (docs/operations.md,
  "Metrics").
"""
