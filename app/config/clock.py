"""The service's one clock, which ``create_app`` puts on the app and every feature reads.

Tokens, the token store, the rate limits' counters, the failed-login limit and the user
directory all take their time from one ``Clock``, so a test that moves it moves them all.
It gives two readings: the wall time (seconds since the epoch), which tokens and stored
records carry and every host must agree on, and a monotonic time for the intervals a
process keeps to itself (the user directory's next look at its file, the second a failed
storage is left alone), which a step of the wall clock must neither stretch nor cut.
"""

from __future__ import annotations

import time


class Clock:
    """The host's clocks: ``clock()`` is the wall time, ``clock.monotonic()`` an interval's."""

    #: The wall time, in seconds since the epoch.
    __call__ = staticmethod(time.time)
    #: A time that only moves forward, in seconds, for intervals alone.
    monotonic = staticmethod(time.monotonic)
    #: Wait this many seconds (a login that waits out its user's cut-off's second).
    sleep = staticmethod(time.sleep)


#: The clock of everything built without one: the host's.
SYSTEM_CLOCK = Clock()
