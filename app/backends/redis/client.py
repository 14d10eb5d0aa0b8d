"""The one way the service talks to Redis: one client, bounded, never retried.

The token store (``app.backends.redis.store``) and the rate limits' counters
(``app.backends.redis.counters``) share one client of this set-up (``redis_backend``) and
its error wrapping; each turns a failure into a BackendUnavailable whose message names
the server and the database, never the password. redis-py's connection pool is
thread-safe and fork-safe (a forked worker finds its parent's connections dropped, and
opens its own), so a client made before gunicorn forks serves every worker.
"""

from __future__ import annotations

from importlib.resources import files

import redis
from redis.backoff import NoBackoff
from redis.connection import parse_url
from redis.retry import Retry


def redis_location(url: str) -> str:
    """Return where ``url`` points, for messages and logs: never its password."""
    options = parse_url(url)  # checked by Settings at start-up
    where = options.get("path") or f"{options.get('host')}:{options.get('port', 6379)}"
    return f"{where} db {options.get('db', 0)}"


def new_client(url: str, timeout: float, connect_timeout: float) -> redis.Redis:
    """Return a client of ``url``: ``timeout`` bounds each reply, ``connect_timeout`` each
    new connection, and nothing is retried, so a dead or frozen Redis fails within one
    timeout, not a multiple. Every key, field and value is text (``decode_responses``).
    The client opens no socket until used."""
    return redis.Redis.from_url(
        url,
        decode_responses=True,
        socket_timeout=timeout,
        socket_connect_timeout=connect_timeout,
        retry=Retry(NoBackoff(), 0),
        # RESP2: any Redis >= 2.6 speaks it, and redis-py then checks a pooled
        # connection before reuse (after a Redis restart, say); with RESP3 its
        # maintenance notifications turn that check off.
        protocol=2,
    )


def read_lua(*names: str) -> str:
    """Return the Lua files ``names`` of this package's ``lua`` folder, joined in order."""
    folder = files(__package__).joinpath("lua")
    return "\n".join(folder.joinpath(name).read_text(encoding="utf-8") for name in names)


#: What redis-py raises when Redis cannot answer now: ConnectionError, TimeoutError,
#: BusyLoadingError, ReadOnlyError, OutOfMemoryError, ExecAbortError, NoPermissionError...
#: (a RedisError), or the socket's own OSError.
REDIS_FAILURES = (redis.RedisError, OSError)


def failure_message(where: str, error: BaseException) -> str:
    """Return the one line that says ``where`` failed: the error's class names the cause.

    ``where`` names the server by ``redis_location``; redis-py's own text shows no password.
    """
    return f"{where}: {type(error).__name__}: {error}"
