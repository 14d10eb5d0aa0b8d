"""Operator endpoints: liveness and readiness probes, Prometheus metrics, the API document."""

from __future__ import annotations

from flask import Blueprint, Response, current_app, request
from werkzeug.exceptions import NotFound

from app.extensions import current_settings, get_store
from app.observability.metrics_scrape import metrics_response
from app.openapi.document import openapi_json

bp = Blueprint("ops", __name__)


@bp.get("/healthz")
def healthz() -> dict[str, str]:
    """Answer 200 while the process serves requests."""
    return {"status": "ok"}


@bp.get("/readyz")
def readyz() -> dict[str, str]:
    """Answer 200 when the refresh-token store answers, else 503."""
    get_store().ping()
    return {"status": "ready"}


@bp.get("/metrics")
def metrics() -> Response:
    """Answer every count in Prometheus's text format to the addresses of METRICS_ALLOW.

    Anyone else gets the 404 of a path that does not exist, as when METRICS is off: the
    counts say how the service is used and attacked. The address is the one the app
    sees, the peer's, or the client's as a trusted proxy forwarded it.
    """
    response = metrics_response(request.remote_addr, current_settings().metrics_allow)
    if response is None:
        raise NotFound()
    return response


@bp.get("/openapi.json")
def openapi() -> Response:
    """Serve the service's OpenAPI 3.1 document (built once per app)."""
    return Response(openapi_json(current_app), content_type="application/json")
