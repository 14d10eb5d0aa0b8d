"""Fixed-window counters in the token store's Redis, shared by every worker of every host.

A request's hits on every limit are one Lua script, so one round trip however many
limits RATE_LIMIT_AUTH lists (``limits``' Redis storage makes one per limit, and a
second for the time left). Keys are ``rl:<endpoint>/<address>/<amount>/<seconds>``:
never one of the token store's ``rt:`` keys. Each expires with its window.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.connection import parse_url
from redis.retry import Retry

from app.rate_limit.counters import CountersUnavailableError

KEY_PREFIX = "rl:"
#: KEYS: one counter per limit; ARGV: each one's window in milliseconds. Returns, for
#: each, its hits after this one and the milliseconds left in its window.
HIT_SCRIPT = """
local answer = {}
for i, key in ipairs(KEYS) do
    local hits = redis.call('INCR', key)
    local left = redis.call('PTTL', key)
    if left < 0 then  -- a new window (or a key that lost its expiry): it starts now
        left = tonumber(ARGV[i])
        redis.call('PEXPIRE', key, left)
    end
    answer[2 * i - 1] = hits
    answer[2 * i] = left
end
return answer
"""
#: KEYS: counters to take one hit back from; a counter that is gone (its window ended) or
#: at 0 is left alone, and DECR keeps a key's expiry.
FORGIVE_SCRIPT = """
for _, key in ipairs(KEYS) do
    local hits = tonumber(redis.call('GET', key))
    if hits and hits > 0 then
        redis.call('DECR', key)
    end
end
return 0
"""


class RedisCounters:
    """Fixed-window counters in the Redis at ``url``.

    As the token store's client: created lazily in each process, one attempt per
    call, each bounded by ``timeout`` (``connect_timeout`` for a new connection).
    """

    def __init__(self, url: str, timeout: float, connect_timeout: float) -> None:
        self.url = url
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        options = parse_url(url)  # checked by Settings at start-up
        # for messages and logs: never the password
        where = options.get("path") or f"{options.get('host')}:{options.get('port', 6379)}"
        self.location = f"{where} db {options.get('db', 0)}"
        self._client: tuple[int, Any] | None = None

    def hit(self, counters: Sequence[tuple[str, int]]) -> list[tuple[int, float]]:
        """Count one hit on each (key, window in seconds); return each one's hits and the
        seconds until its window ends, in the order given."""
        try:
            answer = self._script()(
                keys=[KEY_PREFIX + key for key, _ in counters],
                args=[window * 1000 for _, window in counters],
            )
        except (redis.RedisError, OSError) as error:
            raise CountersUnavailableError(
                f"Redis {self.location}: {type(error).__name__}: {error}"
            ) from error
        return [(int(answer[n]), int(answer[n + 1]) / 1000) for n in range(0, len(answer), 2)]

    def forgive(self, keys: Sequence[str]) -> None:
        """Take back one hit from each running counter of ``keys`` (none goes below 0)."""
        try:
            self._script().registered_client.eval(
                FORGIVE_SCRIPT, len(keys), *[KEY_PREFIX + key for key in keys]
            )
        except (redis.RedisError, OSError) as error:
            raise CountersUnavailableError(
                f"Redis {self.location}: {type(error).__name__}: {error}"
            ) from error

    def close(self) -> None:
        """Release this process's connections (reopened on next use)."""
        client, self._client = self._client, None
        if client is not None and client[0] == os.getpid():
            client[1].registered_client.close()

    def _script(self) -> Any:
        client = self._client
        if client is not None and client[0] == os.getpid():
            return client[1]
        connection = redis.Redis.from_url(
            self.url,
            socket_timeout=self.timeout,
            socket_connect_timeout=self.connect_timeout,
            retry=Retry(NoBackoff(), 0),
            protocol=2,
        )
        script = connection.register_script(HIT_SCRIPT)
        self._client = (os.getpid(), script)
        return script
