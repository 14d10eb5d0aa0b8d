"""What a caller does while its backend fails: one try a second, one log line a minute.

The address limit then lets requests pass (it guards capacity), the failed-login limit
refuses logins (it guards a password), the users' cut-offs keep the ones known (they
guard a logout); each says so in its own words, but all keep this one state: after a
failure the backend is not tried again for RETRY_AFTER_FAILURE seconds, and at most one
line is logged per FAILURE_LOG_INTERVAL, per process, with the count of the failures it
did not report.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

#: After a storage failure, requests pass unchecked this long before the next try, so a
#: frozen store costs one timeout a second per process, not one per request.
RETRY_AFTER_FAILURE = 1.0
#: At most one log line about storage failures per this many seconds, per process.
FAILURE_LOG_INTERVAL = 60.0


class BackendFailures:
    """The failures of one caller's backend calls, in one process."""

    def __init__(self, clock: Callable[[], float]) -> None:
        #: Monotonic seconds: the app's clock's ``monotonic``.
        self.clock = clock
        self._retry_at = 0.0  # 0: not failing
        self._reported_at = -math.inf
        self._unreported = 0
        self._lock = threading.Lock()

    def waiting(self) -> bool:
        """Return whether a failure is so recent that the backend is not tried again."""
        return bool(self._retry_at) and self.clock() < self._retry_at

    @property
    def failing(self) -> bool:
        """Return whether the last try failed."""
        return bool(self._retry_at)

    def failed(self, tried: bool) -> int | None:
        """Note a failure: of a try (``tried``), or of a call not tried while ``waiting``.
        Return how many earlier ones went unreported if this one is to be logged, else None."""
        now = self.clock()
        with self._lock:
            if tried:
                self._retry_at = now + RETRY_AFTER_FAILURE
            if now - self._reported_at < FAILURE_LOG_INTERVAL:
                self._unreported += 1
                return None
            self._reported_at, unreported, self._unreported = now, self._unreported, 0
        return unreported

    def recovered(self) -> int | None:
        """Note a try that answered: if the backend was failing, return how many
        failures went unreported since the last line (to log the recovery), else None."""
        with self._lock:
            if not self._retry_at:
                return None
            self._retry_at = 0.0
            unreported, self._unreported = self._unreported, 0
            self._reported_at = -math.inf
        return unreported
