"""A clock that moves only when a test moves it: ``create_app(overrides, clock=clock)``."""

from __future__ import annotations

import time

from app.config.clock import Clock


class ManualClock(Clock):
    """Both readings of the service's clock, frozen, and moved together by ``advance``."""

    def __init__(self, now: float | None = None) -> None:
        #: A whole second by default, so issue times are exact.
        self.now = float(int(time.time())) if now is None else now
        self.monotonic_now = 1000.0

    def __call__(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.monotonic_now

    def sleep(self, seconds: float) -> None:
        """Wait: move the time, at once."""
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        """Move the wall time and the monotonic time by ``seconds``."""
        self.now += seconds
        self.monotonic_now += seconds
