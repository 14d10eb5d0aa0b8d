"""The one way the service talks to Redis: a client per process, bounded, never retried.

The token store (``app.backends.redis.store``) and the rate limits' counters
(``app.backends.redis.counters``) share this set-up and its error wrapping; each turns a
failure into its own "unavailable" error, whose message names the server and the
database, never the password.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from importlib.resources import files
from typing import Generic, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.connection import parse_url
from redis.retry import Retry

#: What a client holds beside itself: its registered scripts, say.
Prepared = TypeVar("Prepared")


def redis_location(url: str) -> str:
    """Return where ``url`` points, for messages and logs: never its password."""
    options = parse_url(url)  # checked by Settings at start-up
    where = options.get("path") or f"{options.get('host')}:{options.get('port', 6379)}"
    return f"{where} db {options.get('db', 0)}"


def new_client(
    url: str, timeout: float, connect_timeout: float, *, decode_responses: bool = False
) -> redis.Redis:
    """Return a client of ``url``: ``timeout`` bounds each reply, ``connect_timeout`` each
    new connection, and nothing is retried, so a dead or frozen Redis fails within one
    timeout, not a multiple. The client opens no socket until used."""
    return redis.Redis.from_url(
        url,
        decode_responses=decode_responses,
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


class ProcessClient(Generic[Prepared]):
    """A client of one Redis, and what ``prepare`` makes of it, created lazily per process.

    Nothing opened before gunicorn forks is used by a worker; the client's
    connection pool is thread-safe. Two threads may both create one: one is kept,
    the other dropped unused.
    """

    def __init__(
        self,
        url: str,
        timeout: float,
        connect_timeout: float,
        prepare: Callable[[redis.Redis], Prepared],
        *,
        decode_responses: bool = False,
    ) -> None:
        self.url = url
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.location = redis_location(url)
        self._prepare = prepare
        self._decode_responses = decode_responses
        self._current: tuple[int, redis.Redis, Prepared] | None = None

    def get(self) -> tuple[redis.Redis, Prepared]:
        """Return this process's client and what was prepared with it."""
        current = self._current
        if current is None or current[0] != os.getpid():
            client = new_client(
                self.url,
                self.timeout,
                self.connect_timeout,
                decode_responses=self._decode_responses,
            )
            current = (os.getpid(), client, self._prepare(client))
            self._current = current
        return current[1], current[2]

    def close(self) -> None:
        """Close this process's connections (reopened on next use); a parent's are left
        to the parent."""
        current, self._current = self._current, None
        if current is not None and current[0] == os.getpid():
            current[1].close()
