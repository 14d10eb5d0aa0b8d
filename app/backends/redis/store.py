"""Scale-out store: refresh-token digests in one Redis that every host shares.

Key layout (``decode_responses`` is on: every key, field and value is text):

``rt:token:<digest>``   hash ``{username, issued_at}`` of one token, plus ``expires_at``
                        with a lifetime, and ``family``, ``generation``, ``retired_at``
                        once rotation touched it (see RefreshTokenStore), and ``parent``
                        (the digest rotated into it) on a successor, ``lineage`` on a
                        live one
``rt:user:<username>``  sorted set of that user's live digests, oldest first, scored by
                        the microsecond of issue, raised past the user's newest by the
                        scripts: same-second tokens are in order of issue, exactly
``rt:digests``          sorted set of every live digest, score 0: count and prefix look-up
``rt:family:<digest>``  sorted set of a rotated family's digests, scored by generation
``rt:lineage:<digest>`` hash ``{family, username}`` of a rotated family (and its
                        ``expires_at`` with a lifetime), under the digest
                        of its lineage (base.LINEAGE_LENGTH), which the family's live
                        token's hash holds too (``lineage``): a token the family forgot is
                        still its own
``rt:expiring``         sorted set of ``<digest><username>`` of every token with an
                        expiry, scored by it: the index that purges expired tokens
``rt:denied:<digest>``  a signed token refused until the time it holds (a logged-out
                        cookie token), with a TTL to then

A digest is 64 hex digits, so no token key can be mistaken for another kind, and
each user key is its fixed prefix followed by the username verbatim: usernames
holding ``:`` or anything else get keys of their own. With SPEC.md's defaults no
key has a TTL (refresh tokens are valid until revoked). With a lifetime, a token's
hash and its family's set and lineage expire with the token, and each issue or rotation purges
a bounded batch of ``rt:expiring``'s due members from the other sets, so nothing
dangles for long. Each change is one Lua script (or one ``SET``, a deny entry), so no
reader ever sees a token without its index entries, and a login, a refresh, a rotation or
a revoke is one round trip. Times come from the client (the app host's clock), as with
SQLite; the TTLs are set relative to them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from app.backends.interface import (
    DIGEST_PREFIX_LENGTH,
    PURGE_BATCH,
    RETIRED_GENERATIONS_KEPT,
    BackendUnavailable,
    Outcome,
    RefreshTokenPolicy,
    RefreshTokenStore,
    Revocation,
    Rotation,
    TokenRecord,
    lineage_digest,
    token_digest,
)
from app.backends.redis.client import REDIS_FAILURES, ProcessClient, failure_message, read_lua
from app.config.clock import SYSTEM_CLOCK, Clock

TOKEN_KEY_PREFIX = "rt:token:"  # noqa: S105 (a key prefix)
USER_KEY_PREFIX = "rt:user:"
FAMILY_KEY_PREFIX = "rt:family:"
LINEAGE_KEY_PREFIX = "rt:lineage:"
DIGESTS_KEY = "rt:digests"
EXPIRING_KEY = "rt:expiring"
DENIED_KEY_PREFIX = "rt:denied:"
#: Expired tokens ``count``, ``tokens_of`` and ``revoke_digest`` purge per script call.
PURGE_ALL_BATCH = 1000

#: Each script's source: the shared head (lua/forget.lua), then its own file; the
#: defaults' login (lua/login.lua) needs none of the head's functions and goes without.
SCRIPTS = {
    file.removesuffix(".lua"): read_lua("forget.lua", file)
    for file in ("revoke.lua", "revoke_all.lua", "revoke_prefix.lua", "purge.lua", "issue.lua",
                 "rotate.lua")
} | {"login": read_lua("login.lua")}  # fmt: skip
#: The fields ``owner_of`` reads of a token's hash.
OWNER_FIELDS = ("username", "expires_at", "retired_at")


def _microseconds(now: float) -> int:
    """Return a time in whole microseconds: exact in a sorted set's score (below 2**53)."""
    return int(now * 1_000_000)


@dataclass(frozen=True)
class _Connection:
    """One process's client (with its connection pool) and its scripts."""

    client: redis.Redis
    revoke: Script
    revoke_all: Script
    revoke_prefix: Script
    purge: Script
    issue: Script
    rotate: Script
    login: Script

    @classmethod
    def of(cls, client: redis.Redis) -> _Connection:
        """Return ``client`` with the scripts registered (loaded by Redis on first use)."""
        scripts = {name: client.register_script(source) for name, source in SCRIPTS.items()}
        return cls(client, **scripts)


def _run_login(connection: _Connection, keys: tuple[str, ...], args: tuple[str | int, ...]) -> None:
    """Run lua/login.lua: one EVALSHA, one reply (a MULTI of its three writes would cost
    this process five replies to read); redis-py's Script loads it if Redis lacks it."""
    try:
        connection.client.execute_command("EVALSHA", connection.login.sha, 3, *keys, *args)
    except NoScriptError:  # a Redis restarted since, or another one: load it, run it
        connection.login(keys=keys, args=args, client=connection.client)


class RedisTokenStore(RefreshTokenStore):
    """Refresh tokens in one Redis, shared by every worker of every host.

    The client is app/backends/redis/client.py's: created lazily in each process, each reply
    bounded by ``timeout`` and each new connection by ``connect_timeout`` (default:
    ``timeout``), nothing retried, so a dead or frozen Redis answers
    BackendUnavailable within one timeout, not a multiple.
    """

    remote = True

    def __init__(
        self,
        url: str,
        timeout: float,
        connect_timeout: float | None = None,
        policy: RefreshTokenPolicy | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(policy, clock)
        self.url = url
        self.timeout = timeout
        self.connect_timeout = timeout if connect_timeout is None else connect_timeout
        self._client = ProcessClient(
            url, timeout, self.connect_timeout, _Connection.of, decode_responses=True
        )
        #: Where the store is, for messages and logs: never the password.
        self.location = self._client.location

    def issue(self, token: str, username: str) -> None:
        now, policy = self.clock(), self.policy
        digest, issued_at = token_digest(token), int(now)
        if not (policy.lifetime or policy.per_user):  # SPEC.md's defaults
            keys = (TOKEN_KEY_PREFIX + digest, USER_KEY_PREFIX + username, DIGESTS_KEY)
            try:  # _answering's work without its generator frames: on every login
                _run_login(self._open(), keys, (username, issued_at, _microseconds(now), digest))
            except REDIS_FAILURES as error:
                raise self._unavailable(error) from error
            return
        expires_at = issued_at + policy.lifetime if policy.lifetime else ""
        with self._answering() as connection:
            self._run(
                connection, connection.issue, [], digest, username, repr(now),
                issued_at, expires_at, policy.per_user, PURGE_BATCH, _microseconds(now),
            )  # fmt: skip

    def owner_of(self, token: str) -> str | None:
        key = TOKEN_KEY_PREFIX + token_digest(token)
        try:  # _answering's work without its generator frames, HMGET without hmget's: every /token
            record = self._open().client.execute_command("HMGET", key, *OWNER_FIELDS)
        except REDIS_FAILURES as error:
            raise self._unavailable(error) from error
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
                PURGE_BATCH, _microseconds(now), lineage_digest(token) or "",
            )  # fmt: skip
        return Rotation(Outcome(outcome), family[:DIGEST_PREFIX_LENGTH])

    def revoke(self, token: str) -> Revocation:
        with self._answering() as connection:
            known, reused, family, username = self._call(
                connection, connection.revoke, [],
                token_digest(token), lineage_digest(token) or "", repr(self.clock()),
            )  # fmt: skip
        return Revocation(bool(known), bool(reused), family[:DIGEST_PREFIX_LENGTH], username)

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

    def is_denied(self, *digests: str) -> bool:
        with self._answering() as connection:
            untils = cast(
                list[str | None],
                connection.client.mget([DENIED_KEY_PREFIX + digest for digest in digests]),
            )
        now = self.clock()
        return any(until is not None and now < float(until) for until in untils)

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
        self._client.close()

    @classmethod
    def _run(
        cls, connection: _Connection, script: Script, keys: list[str], *args: str | int
    ) -> int:
        return int(cls._call(connection, script, keys, *args))

    @staticmethod
    def _call(connection: _Connection, script: Script, keys: list[str], *args: str | int) -> Any:
        return script(
            keys=[DIGESTS_KEY, EXPIRING_KEY, *keys],
            args=[TOKEN_KEY_PREFIX, USER_KEY_PREFIX, FAMILY_KEY_PREFIX, LINEAGE_KEY_PREFIX, *args],
            client=connection.client,
        )

    @contextmanager
    def _answering(self) -> Iterator[_Connection]:
        """Yield this process's connection; turn every Redis failure into one error."""
        try:
            yield self._open()
        except REDIS_FAILURES as error:
            raise self._unavailable(error) from error

    def _unavailable(self, error: BaseException) -> BackendUnavailable:
        return BackendUnavailable(failure_message(f"Redis store {self.location}", error))

    def _open(self) -> _Connection:
        return self._client.get()[1]
