"""Scale-out store: refresh-token digests in one Redis that every host shares.

Key layout (``decode_responses`` is on: every key, field and value is text):

``rt:token:<digest>``  hash ``{username, issued_at}`` of one token
``rt:user:<username>`` sorted set of that user's digests, scored by issued_at
``rt:digests``         sorted set of every digest, score 0: count and prefix look-up

A digest is 64 hex digits, so no token key can be mistaken for another kind, and
each user key is its fixed prefix followed by the username verbatim: usernames
holding ``:`` or anything else get keys of their own. No key has a TTL (refresh
tokens are valid until revoked). Each operation is one MULTI/EXEC transaction or
one Lua script, so no reader ever sees a token without its index entries.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast

import redis
from redis.backoff import NoBackoff
from redis.commands.core import Script
from redis.connection import parse_url
from redis.retry import Retry

from app.store.base import (
    RefreshTokenStore,
    StoreUnavailableError,
    TokenRecord,
    token_digest,
)

TOKEN_KEY_PREFIX = "rt:token:"  # noqa: S105 (a key prefix)
USER_KEY_PREFIX = "rt:user:"
DIGESTS_KEY = "rt:digests"

# Shared head of the scripts: KEYS[1] is DIGESTS_KEY, ARGV[1] and ARGV[2] the two
# key prefixes. A token's user key is found from the token's own hash, so it
# cannot be declared in KEYS: the store needs one Redis (with replicas if you
# like), not Redis Cluster.
_FORGET = """
local digests_key, token_prefix, user_prefix = KEYS[1], ARGV[1], ARGV[2]
local function forget(digest)
    local token_key = token_prefix .. digest
    local username = redis.call('HGET', token_key, 'username')
    redis.call('ZREM', digests_key, digest)
    if not username then
        return 0
    end
    redis.call('DEL', token_key)
    redis.call('ZREM', user_prefix .. username, digest)
    return 1
end
"""
#: ARGV[3]: the digest. Returns 1 if the token was known, else 0.
REVOKE_SCRIPT = _FORGET + "return forget(ARGV[3])\n"
#: KEYS[2]: the user key. Returns how many tokens were forgotten.
REVOKE_ALL_SCRIPT = (
    _FORGET
    + """
local forgotten = 0
for _, digest in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    forgotten = forgotten + forget(digest)
end
redis.call('DEL', KEYS[2])
return forgotten
"""
)
#: ARGV[3]: a lowercase hex prefix. Forgets the one token it matches; returns 1 or 0.
REVOKE_PREFIX_SCRIPT = (
    _FORGET
    + """
local prefix = ARGV[3]
local found = redis.call('ZRANGEBYLEX', digests_key, '[' .. prefix, '(' .. prefix .. 'g',
                         'LIMIT', 0, 2)
if #found ~= 1 then
    return 0
end
return forget(found[1])
"""
)


@dataclass(frozen=True)
class _Connection:
    """One process's client (with its connection pool) and its scripts."""

    pid: int
    client: redis.Redis
    revoke: Script
    revoke_all: Script
    revoke_prefix: Script


class RedisTokenStore(RefreshTokenStore):
    """Refresh tokens in one Redis, shared by every worker of every host.

    The client and its connection pool are created lazily in each process, so
    nothing opened before gunicorn forks is used by a worker; the pool is
    thread-safe. ``timeout`` bounds each reply and ``connect_timeout`` (default:
    ``timeout``) each new connection. redis-py retries nothing here: a dead or
    frozen Redis answers StoreUnavailableError within one timeout, not a multiple.
    """

    def __init__(self, url: str, timeout: float, connect_timeout: float | None = None) -> None:
        options = parse_url(url)  # checked by Settings at start-up
        self.url = url
        self.timeout = timeout
        self.connect_timeout = timeout if connect_timeout is None else connect_timeout
        # for messages and logs: never the password
        where = options.get("path") or f"{options.get('host')}:{options.get('port', 6379)}"
        self.location = f"{where} db {options.get('db', 0)}"
        self._connection: _Connection | None = None

    def issue(self, token: str, username: str) -> None:
        digest, issued_at = token_digest(token), int(time.time())
        with self._answering() as connection:
            transaction = connection.client.pipeline(transaction=True)
            transaction.hset(
                TOKEN_KEY_PREFIX + digest, mapping={"username": username, "issued_at": issued_at}
            )
            transaction.zadd(USER_KEY_PREFIX + username, {digest: issued_at})
            transaction.zadd(DIGESTS_KEY, {digest: 0})
            transaction.execute()

    def owner_of(self, token: str) -> str | None:
        with self._answering() as connection:
            owner = connection.client.hget(TOKEN_KEY_PREFIX + token_digest(token), "username")
        return cast(str | None, owner)  # decode_responses: text, not bytes

    def revoke(self, token: str) -> bool:
        with self._answering() as connection:
            return self._run(connection, connection.revoke, [], token_digest(token)) > 0

    def tokens_of(self, username: str) -> list[TokenRecord]:
        with self._answering() as connection:
            rows = connection.client.zrange(
                USER_KEY_PREFIX + username, 0, -1, withscores=True, score_cast_func=int
            )
        pairs = cast(list[tuple[str, int]], rows)  # decode_responses, score_cast_func=int
        return [TokenRecord.of(digest, username, at) for digest, at in pairs]

    def revoke_all(self, username: str) -> int:
        with self._answering() as connection:
            return self._run(connection, connection.revoke_all, [USER_KEY_PREFIX + username])

    def _revoke_digest(self, prefix: str) -> int:
        with self._answering() as connection:
            return self._run(connection, connection.revoke_prefix, [], prefix)

    def count(self) -> int:
        with self._answering() as connection:
            return int(connection.client.zcard(DIGESTS_KEY))

    def ping(self) -> None:
        with self._answering() as connection:
            connection.client.ping()

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and connection.pid == os.getpid():
            connection.client.close()  # a parent's sockets are left to the parent

    @staticmethod
    def _run(connection: _Connection, script: Script, keys: list[str], *args: str) -> int:
        return int(
            script(
                keys=[DIGESTS_KEY, *keys],
                args=[TOKEN_KEY_PREFIX, USER_KEY_PREFIX, *args],
                client=connection.client,
            )
        )

    @contextmanager
    def _answering(self) -> Iterator[_Connection]:
        """Yield this process's connection; turn every Redis failure into one error."""
        try:
            yield self._open()
        except (redis.RedisError, OSError) as error:
            # ConnectionError, TimeoutError, BusyLoadingError, ReadOnlyError,
            # OutOfMemoryError, ExecAbortError, NoPermissionError... all mean the
            # store cannot answer now; the name of the class says which.
            raise StoreUnavailableError(
                f"Redis store {self.location}: {type(error).__name__}: {error}"
            ) from error

    def _open(self) -> _Connection:
        connection = self._connection
        if connection is not None and connection.pid == os.getpid():
            return connection
        # Two threads may both get here: each builds a client, one is kept, and
        # the other is dropped unused (a client opens no socket until used).
        client = redis.Redis.from_url(
            self.url,
            decode_responses=True,
            socket_timeout=self.timeout,
            socket_connect_timeout=self.connect_timeout,
            retry=Retry(NoBackoff(), 0),
            # RESP2: any Redis >= 2.6 speaks it, and redis-py then checks a pooled
            # connection before reuse (after a Redis restart, say); with RESP3 its
            # maintenance notifications turn that check off.
            protocol=2,
        )
        connection = _Connection(
            pid=os.getpid(),
            client=client,
            revoke=client.register_script(REVOKE_SCRIPT),
            revoke_all=client.register_script(REVOKE_ALL_SCRIPT),
            revoke_prefix=client.register_script(REVOKE_PREFIX_SCRIPT),
        )
        self._connection = connection
        return connection
