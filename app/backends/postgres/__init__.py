"""The PostgreSQL backend: the store and the counters on one pool per process (many hosts)."""

from __future__ import annotations

from app.backends.interface import Backend, RefreshTokenPolicy
from app.backends.postgres.client import shared_pool
from app.backends.postgres.counters import PostgresCounters
from app.backends.postgres.schema import backend_schema
from app.backends.postgres.store import PostgresTokenStore
from app.config.clock import Clock


def postgres_backend(
    url: str,
    timeout: float,
    connect_timeout: float,
    policy: RefreshTokenPolicy | None,
    durability: str,
    pool_size: tuple[int, int],
    clock: Clock,
) -> Backend:
    """Return the store and the counters of the database at ``url``, sharing the process's
    one pool of it (``shared_pool``)."""
    pool = shared_pool(
        url,
        timeout=timeout,
        connect_timeout=connect_timeout,
        min_size=pool_size[0],
        max_size=pool_size[1],
        schema=backend_schema(username_index=bool(policy and policy.per_user)),
    )
    return Backend(
        PostgresTokenStore(pool, policy, durability, clock), PostgresCounters(pool, clock)
    )
