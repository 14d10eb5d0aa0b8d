"""Scale-out store: refresh-token digests in one Redis that every host shares.

Key layout (``decode_responses`` is on: every key, field and value is text):

``rt:token:<digest>``   hash ``{username, issued_at}`` of one token, plus ``expires_at``
                        with a lifetime, and ``family``, ``generation``, ``retired_at``
                        once rotation touched it (see RefreshTokenStore), and ``parent``
                        (the digest rotated into it) on a successor
``rt:user:<username>``  sorted set of that user's live digests, oldest first, scored by
                        the microsecond of issue, raised past the user's newest by the
                        scripts: same-second tokens are in order of issue, exactly
``rt:digests``          sorted set of every live digest, score 0: count and prefix look-up
``rt:family:<digest>``  sorted set of a rotated family's digests, scored by generation
``rt:expiring``         sorted set of ``<digest><username>`` of every token with an
                        expiry, scored by it: the index that purges expired tokens
``rt:denied:<digest>``  a signed token refused until the time it holds (a logged-out
                        cookie token), with a TTL to then

A digest is 64 hex digits, so no token key can be mistaken for another kind, and
each user key is its fixed prefix followed by the username verbatim: usernames
holding ``:`` or anything else get keys of their own. With SPEC.md's defaults no
key has a TTL (refresh tokens are valid until revoked). With a lifetime, a token's
hash and its family's set expire with the token, and each issue or rotation purges
a bounded batch of ``rt:expiring``'s due members from the other sets, so nothing
dangles for long. Each operation is one MULTI/EXEC transaction or one Lua script,
so no reader ever sees a token without its index entries. Times come from the
client (the app host's clock), as with SQLite; the TTLs are set relative to them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import redis
from redis.backoff import NoBackoff
from redis.commands.core import Script
from redis.connection import parse_url
from redis.retry import Retry

from app.store.base import (
    DIGEST_PREFIX_LENGTH,
    PURGE_BATCH,
    RETIRED_GENERATIONS_KEPT,
    Outcome,
    RefreshTokenPolicy,
    RefreshTokenStore,
    Rotation,
    StoreUnavailableError,
    TokenRecord,
    token_digest,
)

TOKEN_KEY_PREFIX = "rt:token:"  # noqa: S105 (a key prefix)
USER_KEY_PREFIX = "rt:user:"
FAMILY_KEY_PREFIX = "rt:family:"
DIGESTS_KEY = "rt:digests"
EXPIRING_KEY = "rt:expiring"
DENIED_KEY_PREFIX = "rt:denied:"
#: Expired tokens ``count``, ``tokens_of`` and ``revoke_digest`` purge per script call.
PURGE_ALL_BATCH = 1000

# Shared head of the scripts: KEYS[1] and KEYS[2] are DIGESTS_KEY and EXPIRING_KEY,
# ARGV[1] to ARGV[3] the key prefixes. A token's user and family keys are found from
# the token's own hash, so they cannot be declared in KEYS: the store needs one Redis
# (with replicas if you like), not Redis Cluster.
_FORGET = """
local digests_key, expiring_key = KEYS[1], KEYS[2]
local token_prefix, user_prefix, family_prefix = ARGV[1], ARGV[2], ARGV[3]
-- the index entries of a token, whose hash may be gone already (its TTL)
local function unindex(digest, username)
    redis.call('ZREM', digests_key, digest)
    redis.call('ZREM', user_prefix .. username, digest)
    redis.call('ZREM', expiring_key, digest .. username)
end
-- every token of a family, live and retired, and the family itself
local function forget_family(family, username)
    local family_key = family_prefix .. family
    for _, member in ipairs(redis.call('ZRANGE', family_key, 0, -1)) do
        redis.call('DEL', token_prefix .. member)
        unindex(member, username)
    end
    redis.call('DEL', family_key)
end
-- one token; a family's live token takes its retired ones along
local function forget(digest)
    local token_key = token_prefix .. digest
    local record = redis.call('HMGET', token_key, 'username', 'family', 'retired_at')
    redis.call('ZREM', digests_key, digest)
    local username, family, retired_at = record[1], record[2], record[3]
    if not username then
        return 0
    end
    redis.call('DEL', token_key)
    unindex(digest, username)
    if family and retired_at then
        redis.call('ZREM', family_prefix .. family, digest)
    elseif family then
        forget_family(family, username)
    end
    return 1
end
-- up to limit tokens whose expiry is at or before now, found by score
local function purge(now, limit)
    local due = redis.call('ZRANGEBYSCORE', expiring_key, '-inf', now, 'LIMIT', 0, limit)
    for _, member in ipairs(due) do
        local digest, username = string.sub(member, 1, 64), string.sub(member, 65)
        local token_key = token_prefix .. digest
        local family = redis.call('HGET', token_key, 'family')
        redis.call('DEL', token_key)
        unindex(digest, username)
        if family then
            redis.call('ZREM', family_prefix .. family, digest)
        end
    end
    return #due
end
local function milliseconds_until(expires_at, now)
    return math.max(1, math.floor((tonumber(expires_at) - now) * 1000))
end
-- a user's score for a token issued at microsecond issued_us: above every token they
-- hold, so that eviction goes by order of issue even within one microsecond or second
local function next_score(user_key, issued_us)
    local newest = redis.call('ZRANGE', user_key, -1, -1, 'WITHSCORES')[2]
    local score = tonumber(issued_us)
    if newest and tonumber(newest) >= score then
        score = tonumber(newest) + 1
    end
    return string.format('%.0f', score)  -- %.14g, Lua's default, would round it
end
"""
#: ARGV[4]: the digest. Returns 1 if the token was known, else 0.
REVOKE_SCRIPT = _FORGET + "return forget(ARGV[4])\n"
#: KEYS[3]: the user key. Returns how many tokens were forgotten.
REVOKE_ALL_SCRIPT = (
    _FORGET
    + """
local forgotten = 0
for _, digest in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    forgotten = forgotten + forget(digest)
end
redis.call('DEL', KEYS[3])
return forgotten
"""
)
#: ARGV[4]: a lowercase hex prefix. Forgets the one token it matches; returns 1 or 0.
REVOKE_PREFIX_SCRIPT = (
    _FORGET
    + """
local prefix = ARGV[4]
local found = redis.call('ZRANGEBYLEX', digests_key, '[' .. prefix, '(' .. prefix .. 'g',
                         'LIMIT', 0, 2)
if #found ~= 1 then
    return 0
end
return forget(found[1])
"""
)
#: ARGV[4]: now, ARGV[5]: the most to purge. Returns how many expired tokens it forgot.
PURGE_SCRIPT = _FORGET + "return purge(ARGV[4], tonumber(ARGV[5]))\n"
#: ARGV[4..11]: digest, username, now, issued_at, expires_at ('' for none), the
#: per-user limit (0 for none), the purge batch, now in microseconds. Issues under a
#: lifetime or a limit.
ISSUE_SCRIPT = (
    _FORGET
    + """
local digest, username, now, issued_at = ARGV[4], ARGV[5], tonumber(ARGV[6]), ARGV[7]
local expires_at, per_user = ARGV[8], tonumber(ARGV[9])
purge(ARGV[6], tonumber(ARGV[10]))
local user_key = user_prefix .. username
if per_user > 0 then
    local live = {}
    for _, member in ipairs(redis.call('ZRANGE', user_key, 0, -1)) do  -- oldest first
        local record = redis.call('HMGET', token_prefix .. member, 'username', 'expires_at')
        if not record[1] then
            unindex(member, username)
        elseif record[2] and tonumber(record[2]) <= now then
            forget(member)
        else
            table.insert(live, member)
        end
    end
    for index = 1, #live - per_user + 1 do
        forget(live[index])
    end
end
local token_key = token_prefix .. digest
redis.call('HSET', token_key, 'username', username, 'issued_at', issued_at)
redis.call('ZADD', user_key, next_score(user_key, ARGV[11]), digest)
redis.call('ZADD', digests_key, 0, digest)
if expires_at ~= '' then
    redis.call('HSET', token_key, 'expires_at', expires_at)
    redis.call('ZADD', expiring_key, expires_at, digest .. username)
    redis.call('PEXPIRE', token_key, milliseconds_until(expires_at, now))
end
return 1
"""
)
#: ARGV[4..13]: digest, successor's digest, username, now, issued_at, lifetime ('' for
#: none), grace, generations kept, purge batch, now in microseconds. Returns {outcome,
#: family}.
ROTATE_SCRIPT = (
    _FORGET
    + """
local digest, successor, username = ARGV[4], ARGV[5], ARGV[6]
local now, issued_at, lifetime = tonumber(ARGV[7]), ARGV[8], ARGV[9]
if lifetime ~= '' then
    purge(ARGV[7], tonumber(ARGV[12]))
end
local token_key = token_prefix .. digest
local record = redis.call('HMGET', token_key, 'username', 'family', 'generation', 'expires_at',
                          'retired_at')
local owner, family, generation, expires_at = record[1], record[2], record[3], record[4]
if not owner or (expires_at and now >= tonumber(expires_at)) then
    return {'unknown', ''}
end
if owner ~= username then
    return {'other_user', ''}
end
family = family or digest
generation = tonumber(generation or '0')
local family_key, user_key = family_prefix .. family, user_prefix .. username
local function retire(member)
    redis.call('HSET', token_prefix .. member, 'retired_at', ARGV[7])
    redis.call('ZREM', digests_key, member)
    redis.call('ZREM', user_key, member)
end
local outcome = 'rotated'
if record[5] then
    local unused = nil
    local grace = tonumber(ARGV[10])
    -- no grace, no retry: a clock read a moment before another rotation is no excuse
    if grace > 0 and now < tonumber(record[5]) + grace then
        -- this token's own successor, if nothing rotated or replaced it yet: a sibling's
        -- successor (another retry's, rotated since) is not its to retry; a successor
        -- made before ``parent`` was recorded has none, so its retry is reuse
        for _, member in ipairs(redis.call('ZRANGEBYSCORE', family_key, generation + 1,
                                           generation + 1)) do
            local state = redis.call('HMGET', token_prefix .. member, 'username', 'retired_at',
                                     'parent')
            if state[1] and not state[2] and state[3] == digest then
                unused = member
            end
        end
    end
    if not unused then
        forget_family(family, username)
        return {'reused', family}
    end
    outcome = 'retried'
    retire(unused)  -- retired, not forgotten: whoever presents it later revokes the family
else
    redis.call('HSET', token_key, 'family', family, 'generation', generation)
    retire(digest)
    redis.call('ZADD', family_key, generation, digest)
end
if not expires_at and lifetime ~= '' then  -- a family older than the setting
    expires_at = tonumber(issued_at) + tonumber(lifetime)
    for _, member in ipairs(redis.call('ZRANGE', family_key, 0, -1)) do
        redis.call('HSET', token_prefix .. member, 'expires_at', expires_at)
        redis.call('ZADD', expiring_key, expires_at, member .. username)
        redis.call('PEXPIRE', token_prefix .. member, milliseconds_until(expires_at, now))
    end
end
local successor_key = token_prefix .. successor
redis.call('HSET', successor_key, 'username', username, 'issued_at', issued_at,
           'family', family, 'generation', generation + 1, 'parent', digest)
redis.call('ZADD', user_key, next_score(user_key, ARGV[13]), successor)
redis.call('ZADD', digests_key, 0, successor)
redis.call('ZADD', family_key, generation + 1, successor)
if expires_at then
    redis.call('HSET', successor_key, 'expires_at', expires_at)
    redis.call('ZADD', expiring_key, expires_at, successor .. username)
    redis.call('PEXPIRE', successor_key, milliseconds_until(expires_at, now))
    redis.call('PEXPIRE', family_key, milliseconds_until(expires_at, now))
end
local cutoff = '(' .. (generation + 1 - tonumber(ARGV[11]))
for _, member in ipairs(redis.call('ZRANGEBYSCORE', family_key, '-inf', cutoff)) do
    redis.call('DEL', token_prefix .. member)
    unindex(member, username)
end
redis.call('ZREMRANGEBYSCORE', family_key, '-inf', cutoff)
return {outcome, family}
"""
)


def _microseconds(now: float) -> int:
    """Return a time in whole microseconds: exact in a sorted set's score (below 2**53)."""
    return int(now * 1_000_000)


@dataclass(frozen=True)
class _Connection:
    """One process's client (with its connection pool) and its scripts."""

    pid: int
    client: redis.Redis
    revoke: Script
    revoke_all: Script
    revoke_prefix: Script
    purge: Script
    issue: Script
    rotate: Script


class RedisTokenStore(RefreshTokenStore):
    """Refresh tokens in one Redis, shared by every worker of every host.

    The client and its connection pool are created lazily in each process, so
    nothing opened before gunicorn forks is used by a worker; the pool is
    thread-safe. ``timeout`` bounds each reply and ``connect_timeout`` (default:
    ``timeout``) each new connection. redis-py retries nothing here: a dead or
    frozen Redis answers StoreUnavailableError within one timeout, not a multiple.
    """

    remote = True

    def __init__(
        self,
        url: str,
        timeout: float,
        connect_timeout: float | None = None,
        policy: RefreshTokenPolicy | None = None,
    ) -> None:
        super().__init__(policy)
        options = parse_url(url)  # checked by Settings at start-up
        self.url = url
        self.timeout = timeout
        self.connect_timeout = timeout if connect_timeout is None else connect_timeout
        # for messages and logs: never the password
        where = options.get("path") or f"{options.get('host')}:{options.get('port', 6379)}"
        self.location = f"{where} db {options.get('db', 0)}"
        self._connection: _Connection | None = None

    def issue(self, token: str, username: str) -> None:
        now, policy = self.clock(), self.policy
        digest, issued_at = token_digest(token), int(now)
        with self._answering() as connection:
            if policy.lifetime or policy.per_user:
                expires_at = issued_at + policy.lifetime if policy.lifetime else ""
                self._run(
                    connection, connection.issue, [], digest, username, repr(now),
                    issued_at, expires_at, policy.per_user, PURGE_BATCH, _microseconds(now),
                )  # fmt: skip
                return
            transaction = connection.client.pipeline(transaction=True)  # SPEC.md's defaults
            transaction.hset(
                TOKEN_KEY_PREFIX + digest, mapping={"username": username, "issued_at": issued_at}
            )
            # no limit, nothing evicted: the microsecond alone orders the listing
            transaction.zadd(USER_KEY_PREFIX + username, {digest: _microseconds(now)})
            transaction.zadd(DIGESTS_KEY, {digest: 0})
            transaction.execute()

    def owner_of(self, token: str) -> str | None:
        key = TOKEN_KEY_PREFIX + token_digest(token)
        with self._answering() as connection:
            record = connection.client.hmget(key, ["username", "expires_at", "retired_at"])
        owner, expires_at, retired_at = cast(list[str | None], record)  # decode_responses: text
        if retired_at is not None or (expires_at is not None and self.clock() >= int(expires_at)):
            return None
        return owner

    def rotate(self, token: str, successor: str, username: str) -> Rotation:
        now, policy = self.clock(), self.policy
        with self._answering() as connection:
            outcome, family = self._call(
                connection, connection.rotate, [],
                token_digest(token), token_digest(successor), username, repr(now), int(now),
                policy.lifetime or "", repr(policy.reuse_grace), RETIRED_GENERATIONS_KEPT,
                PURGE_BATCH, _microseconds(now),
            )  # fmt: skip
        return Rotation(Outcome(outcome), family[:DIGEST_PREFIX_LENGTH])

    def revoke(self, token: str) -> bool:
        with self._answering() as connection:
            return self._run(connection, connection.revoke, [], token_digest(token)) > 0

    def purge_expired(self, limit: int = PURGE_BATCH) -> int:
        with self._answering() as connection:
            return self._run(connection, connection.purge, [], repr(self.clock()), limit)

    def tokens_of(self, username: str) -> list[TokenRecord]:
        self._purge_all_expired()
        with self._answering() as connection:
            digests = cast(list[str], connection.client.zrange(USER_KEY_PREFIX + username, 0, -1))
            reads = connection.client.pipeline(transaction=False)
            for digest in digests:
                reads.hget(TOKEN_KEY_PREFIX + digest, "issued_at")
            times = cast(list[str | None], reads.execute())  # decode_responses: text
        return [
            TokenRecord.of(digest, username, int(at))
            for digest, at in zip(digests, times, strict=True)
            if at is not None  # expired between the two reads
        ]

    def revoke_all(self, username: str) -> int:
        with self._answering() as connection:
            return self._run(connection, connection.revoke_all, [USER_KEY_PREFIX + username])

    def _revoke_digest(self, prefix: str) -> int:
        self._purge_all_expired()
        with self._answering() as connection:
            return self._run(connection, connection.revoke_prefix, [], prefix)

    def deny(self, digest: str, until: float) -> None:
        now = self.clock()
        if until <= now:
            return
        with self._answering() as connection:
            # the TTL counts from this host's clock, like the tokens' (module docstring)
            connection.client.set(
                DENIED_KEY_PREFIX + digest, repr(until), px=max(1, math.ceil((until - now) * 1000))
            )

    def is_denied(self, digest: str) -> bool:
        with self._answering() as connection:
            until = cast(str | None, connection.client.get(DENIED_KEY_PREFIX + digest))
        return until is not None and self.clock() < float(until)

    def count(self) -> int:
        self._purge_all_expired()
        with self._answering() as connection:
            return int(connection.client.zcard(DIGESTS_KEY))

    def _purge_all_expired(self) -> None:
        """Purge every expired token, a batch per script call, so the indexes hold live ones."""
        while self.purge_expired(PURGE_ALL_BATCH) == PURGE_ALL_BATCH:
            pass

    def ping(self) -> None:
        with self._answering() as connection:
            connection.client.ping()

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and connection.pid == os.getpid():
            connection.client.close()  # a parent's sockets are left to the parent

    @classmethod
    def _run(
        cls, connection: _Connection, script: Script, keys: list[str], *args: str | int
    ) -> int:
        return int(cls._call(connection, script, keys, *args))

    @staticmethod
    def _call(connection: _Connection, script: Script, keys: list[str], *args: str | int) -> Any:
        return script(
            keys=[DIGESTS_KEY, EXPIRING_KEY, *keys],
            args=[TOKEN_KEY_PREFIX, USER_KEY_PREFIX, FAMILY_KEY_PREFIX, *args],
            client=connection.client,
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
            purge=client.register_script(PURGE_SCRIPT),
            issue=client.register_script(ISSUE_SCRIPT),
            rotate=client.register_script(ROTATE_SCRIPT),
        )
        self._connection = connection
        return connection
