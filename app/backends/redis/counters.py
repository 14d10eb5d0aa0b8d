"""Fixed-window counters in the token store's Redis, shared by every worker of every host.

A request's hits on every limit are one Lua script (lua/hit.lua), so one round trip
however many limits RATE_LIMIT_AUTH lists (``limits``' Redis storage makes one per
limit, and a second for the time left). Keys are ``rl:<endpoint>/<address>/<amount>/<seconds>``:
never one of the token store's ``rt:`` keys. Each expires with its window.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis
from redis.commands.core import Script

from app.backends.interface import BackendUnavailable
from app.backends.redis.client import REDIS_FAILURES, ProcessClient, failure_message, read_lua

KEY_PREFIX = "rl:"
HIT_SCRIPT = read_lua("hit.lua")
FORGIVE_SCRIPT = read_lua("forgive.lua")


def _register_hit(client: redis.Redis) -> Script:
    return client.register_script(HIT_SCRIPT)


class RedisCounters:
    """Fixed-window counters in the Redis at ``url``.

    As the token store's client (app/backends/redis/client.py): created lazily in each
    process, one attempt per call, each bounded by ``timeout`` (``connect_timeout``
    for a new connection).
    """

    def __init__(self, url: str, timeout: float, connect_timeout: float) -> None:
        self.url = url
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._client = ProcessClient(url, timeout, connect_timeout, _register_hit)
        #: Where the counters are, for messages and logs: never the password.
        self.location = self._client.location

    def hit(self, counters: Sequence[tuple[str, int]]) -> list[tuple[int, float]]:
        """Count one hit on each (key, window in seconds); return each one's hits and the
        seconds until its window ends, in the order given."""
        try:
            answer = self._client.get()[1](
                keys=[KEY_PREFIX + key for key, _ in counters],
                args=[window * 1000 for _, window in counters],
            )
        except REDIS_FAILURES as error:
            raise self._unavailable(error) from error
        return [(int(answer[n]), int(answer[n + 1]) / 1000) for n in range(0, len(answer), 2)]

    def forgive(self, keys: Sequence[str]) -> None:
        """Take back one hit from each running counter of ``keys`` (none goes below 0)."""
        try:
            self._client.get()[0].eval(
                FORGIVE_SCRIPT, len(keys), *[KEY_PREFIX + key for key in keys]
            )
        except REDIS_FAILURES as error:
            raise self._unavailable(error) from error

    def close(self) -> None:
        """Release this process's connections (reopened on next use)."""
        self._client.close()

    def _unavailable(self, error: BaseException) -> BackendUnavailable:
        return BackendUnavailable(failure_message(f"Redis {self.location}", error))
