"""``/admin/``: the admin console, a static page that manages sessions through the API.

Three files served as they are (a page, its style sheet and its one script), with a
Content-Security-Policy that lets the page load only those and talk only to this
service: no inline script, no eval, no framing, nothing from elsewhere. The page keeps
its tokens in memory, so no cookie is involved and no caching is wanted.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from flask import Blueprint, Response

bp = Blueprint("console", __name__, url_prefix="/admin")

#: The console's files by name, with their media types.
FILES = {
    "index.html": "text/html; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
}
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
#: Added to each of the console's answers.
CONSOLE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
}


@cache
def console_file(name: str) -> bytes:
    """Return the bytes of one of the console's files, shipped in this package (read once)."""
    return files(__name__).joinpath(name).read_bytes()


def console_response(name: str) -> Response:
    """Return one of the console's files with the console's headers."""
    return Response(console_file(name), content_type=FILES[name], headers=CONSOLE_HEADERS)


@bp.get("/")
def page() -> Response:
    """Serve the console's page."""
    return console_response("index.html")


@bp.get("/console.css")
def style_sheet() -> Response:
    """Serve the console's style sheet."""
    return console_response("console.css")


@bp.get("/console.js")
def script() -> Response:
    """Serve the console's script."""
    return console_response("console.js")
