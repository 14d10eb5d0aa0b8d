"""The Redis backend: the store and the counters on one client of one Redis (many hosts)."""

from __future__ import annotations

from app.backends.interface import Backend, RefreshTokenPolicy
from app.backends.redis.client import new_client, redis_location
from app.backends.redis.counters import RedisCounters
from app.backends.redis.store import RedisTokenStore
from app.config.clock import Clock


def redis_backend(
    url: str,
    timeout: float,
    connect_timeout: float,
    policy: RefreshTokenPolicy | None,
    clock: Clock,
) -> Backend:
    """Return the store and the counters of the Redis at ``url``, sharing one client."""
    client = new_client(url, timeout, connect_timeout)
    location = redis_location(url)
    return Backend(
        RedisTokenStore(client, location, policy, clock), RedisCounters(client, location)
    )
