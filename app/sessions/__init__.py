"""Sessions you can see and end: each worker's cut-off cache (``cutoffs``), set up with
the app here, and the steps that every way of ending sessions shares (``ending``). A
session is a refresh-token family (app/backends/interface.py, ``Session``);
docs/sessions.md explains sessions, the cut-off and its bound."""

from __future__ import annotations

from flask import Flask

from app.config.settings import Settings
from app.extensions import CUTOFFS, clock_of, store_of
from app.sessions.cutoffs import CutoffCache


def init_sessions(app: Flask, settings: Settings) -> None:
    """Attach this worker's cut-off cache, on the app's store and clock."""
    app.extensions[CUTOFFS] = CutoffCache(
        store_of(app),
        clock_of(app),
        refresh_every=settings.session_cutoff_refresh,
        horizon=settings.access_token_lifetime + settings.clock_skew + 1,
    )
