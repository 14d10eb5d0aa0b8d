"""Fixed-window counters in the token store's Redis, shared by every worker of every host.

A request's hits on every limit are one Lua script (lua/hit.lua), so one round trip
however many limits RATE_LIMIT_AUTH lists (``limits``' Redis storage makes one per
limit, and a second for the time left). Keys are ``rl:<endpoint>/<address>/<amount>/<seconds>``:
never one of the token store's ``rt:`` keys. Each expires with its window.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

from app.backends.interface import BackendUnavailable
from app.backends.redis.client import REDIS_FAILURES, failure_message, read_lua

KEY_PREFIX = "rl:"
HIT_SCRIPT = read_lua("hit.lua")
FORGIVE_SCRIPT = read_lua("forgive.lua")


class RedisCounters:
    """Fixed-window counters in the Redis of ``client`` (the store's, ``redis_backend``):
    one attempt per call, each bounded by the client's timeouts."""

    def __init__(self, client: redis.Redis, location: str) -> None:
        self.client = client
        #: Where the counters are, for messages and logs: never the password.
        self.location = location
        self._hit = client.register_script(HIT_SCRIPT)
        self._forgive = client.register_script(FORGIVE_SCRIPT)

    def hit(self, counters: Sequence[tuple[str, int]]) -> list[tuple[int, float]]:
        """Count one hit on each (key, window in seconds); return each one's hits and the
        seconds until its window ends, in the order given."""
        try:
            answer = self._hit(
                keys=[KEY_PREFIX + key for key, _ in counters],
                args=[window * 1000 for _, window in counters],
            )
        except REDIS_FAILURES as error:
            raise self._unavailable(error) from error
        return [(int(answer[n]), int(answer[n + 1]) / 1000) for n in range(0, len(answer), 2)]

    def forgive(self, keys: Sequence[str]) -> None:
        """Take back one hit from each running counter of ``keys`` (none goes below 0)."""
        try:
            self._forgive(keys=[KEY_PREFIX + key for key in keys])
        except REDIS_FAILURES as error:
            raise self._unavailable(error) from error

    def close(self) -> None:
        """Release this process's connections (the store's too: both reopen on next use)."""
        self.client.close()

    def _unavailable(self, error: BaseException) -> BackendUnavailable:
        return BackendUnavailable(failure_message(f"Redis {self.location}", error))
