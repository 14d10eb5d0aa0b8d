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
                        of its lineage (interface.LINEAGE_LENGTH), which the family's live
                        token's hash holds too (``lineage``): a token the family forgot is
                        still its own
``rt:expiring``         sorted set of ``<digest><username>`` of every token with an
                        expiry, scored by it: the index that purges expired tokens
``rt:denied:<digest>``  a signed token refused until the time it holds (a logged-out
                        cookie token), with a TTL to then
``rt:cutoffs``          sorted set of usernames scored by their cut-off
                        (``log_out_everywhere``)
``rt:schema``           the version of this layout: 2 once every token from before
                        sessions has its session (``session``, ``logged_in_at``,
                        ``last_used_at``, ``address`` and ``user_agent`` in its hash, the
                        same on every token of a family)
``rt:copy-probe:<hex>`` written for a moment by ``is_same_store`` (expires within a minute)

A digest is 64 hex digits, so no token key can be mistaken for another kind, and
each user key is its fixed prefix followed by the username verbatim: usernames
holding ``:`` or anything else get keys of their own. With SPEC.md's defaults no
key has a TTL (refresh tokens are valid until revoked). With a lifetime, a token's
hash and its family's set and lineage expire with the token, and each issue or rotation purges
a bounded batch of ``rt:expiring``'s due members from the other sets, so nothing
dangles for long. Each change is one Lua script (or one ``SET``, a deny entry), so no
reader ever sees a token without its index entries, and a login, a refresh, a rotation,
a revoke, a page of sessions or a logout everywhere is one round trip (a refresh without
rotation writes its session's last use once a minute: a second one). Times come from the
client (the app host's clock), as with SQLite; the TTLs are set relative to them.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, cast

import redis
from redis.commands.core import Script

from app.backends.interface import (
    DIGEST_PREFIX_LENGTH,
    IMPORT_BATCH,
    PURGE_BATCH,
    RETIRED_GENERATIONS_KEPT,
    UNKNOWN_CLIENT,
    BackendUnavailable,
    Cutoff,
    DenyEntry,
    IdleSession,
    Imported,
    Issued,
    LiveToken,
    LoginClient,
    Outcome,
    Record,
    RefreshTokenPolicy,
    RefreshTokenStore,
    Revocation,
    Rotation,
    Session,
    SessionPage,
    StoredToken,
    TokenRecord,
    batches,
    check_page_limit,
    is_session_id,
    lineage_digest,
    new_session_id,
    page_of,
    parse_session_cursor,
    to_the_minute,
    token_digest,
)
from app.backends.redis.client import REDIS_FAILURES, failure_message, read_lua
from app.config.clock import SYSTEM_CLOCK, Clock

TOKEN_KEY_PREFIX = "rt:token:"  # noqa: S105 (a key prefix)
USER_KEY_PREFIX = "rt:user:"
FAMILY_KEY_PREFIX = "rt:family:"
LINEAGE_KEY_PREFIX = "rt:lineage:"
DIGESTS_KEY = "rt:digests"
EXPIRING_KEY = "rt:expiring"
DENIED_KEY_PREFIX = "rt:denied:"
COPY_PROBE_KEY_PREFIX = "rt:copy-probe:"
CUTOFFS_KEY = "rt:cutoffs"
SCHEMA_KEY = "rt:schema"
#: The layout's version (``SCHEMA_KEY``): 2, sessions.
SCHEMA_VERSION = 2
#: Expired tokens ``count``, ``tokens_of`` and ``revoke_digest`` purge per script call.
PURGE_ALL_BATCH = 1000

#: Each script's source: the shared head (lua/forget.lua), then its own file; the
#: defaults' login (lua/login.lua) needs none of the head's functions and goes without.
SCRIPTS = {
    file.removesuffix(".lua"): read_lua("forget.lua", file)
    for file in ("revoke.lua", "revoke_all.lua", "revoke_prefix.lua", "purge.lua", "issue.lua",
                 "rotate.lua", "sessions.lua", "end_session.lua", "log_out_everywhere.lua")
} | {name: read_lua(f"{name}.lua") for name in ("login", "touch", "migrate")}  # fmt: skip
#: The fields ``owner_of`` reads of a token's hash.
OWNER_FIELDS = ("username", "expires_at", "retired_at", "last_used_at")
#: The fields ``describe`` reads of a token's hash.
DESCRIBED_FIELDS = ("username", "issued_at", "expires_at", "retired_at", "last_used_at")
#: The fields of a token's hash an import writes as they are (``retired_at`` is a float's repr).
PLAIN_FIELDS = (
    "username", "issued_at", "expires_at", "family", "generation", "parent", "lineage",
    "session", "logged_in_at", "last_used_at", "address", "user_agent",
)  # fmt: skip


def _microseconds(now: float) -> int:
    """Return a time in whole microseconds: exact in a sorted set's score (below 2**53)."""
    return int(now * 1_000_000)


class RedisTokenStore(RefreshTokenStore):
    """Refresh tokens in one Redis, shared by every worker of every host.

    ``client`` is app/backends/redis/client.py's (``redis_backend``): each reply bounded by
    its timeout and each new connection by its connect timeout, nothing retried, so a
    dead or frozen Redis answers BackendUnavailable within one timeout, not a multiple.
    """

    remote = True

    def __init__(
        self,
        client: redis.Redis,
        location: str,
        policy: RefreshTokenPolicy | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(policy, clock)
        self.client = client
        self.location = location
        scripts = {name: client.register_script(source) for name, source in SCRIPTS.items()}
        self._revoke, self._revoke_all = scripts["revoke"], scripts["revoke_all"]
        self._revoke_prefix, self._purge = scripts["revoke_prefix"], scripts["purge"]
        self._sessions, self._end_session = scripts["sessions"], scripts["end_session"]
        self._log_out_everywhere, self._touch = scripts["log_out_everywhere"], scripts["touch"]
        self._migrate_family = scripts["migrate"]
        #: Whether this store found the layout at its version (``_migrate``).
        self._migrated = False
        self._issue, self._rotate, self._login = (
            scripts["issue"],
            scripts["rotate"],
            scripts["login"],
        )

    def issue(self, token: str, username: str, client: LoginClient | None = None) -> Issued:
        now, policy = self.clock(), self.policy
        digest, issued_at = token_digest(token), int(now)
        seen = (client or UNKNOWN_CLIENT).kept()
        session = (new_session_id(), to_the_minute(now), seen.address, seen.user_agent)
        if not (policy.lifetime or policy.per_user):  # SPEC.md's defaults: lua/login.lua
            keys = (TOKEN_KEY_PREFIX + digest, USER_KEY_PREFIX + username, DIGESTS_KEY, CUTOFFS_KEY)
            args = (username, issued_at, _microseconds(now), digest, *session)
            with self._answering():  # the Script loads itself where Redis lacks it
                cutoff, ended = self._login(keys=keys, args=args), 0
        else:
            expires_at = issued_at + policy.lifetime if policy.lifetime else ""
            with self._answering():
                cutoff, ended = self._call(
                    self._issue, [CUTOFFS_KEY], digest, username, repr(now), issued_at,
                    expires_at, policy.per_user, PURGE_BATCH, _microseconds(now), *session,
                )  # fmt: skip
        return Issued(int(float(cutoff)) if cutoff else None, int(ended))

    def owner_of(self, token: str) -> str | IdleSession | None:
        key, now = TOKEN_KEY_PREFIX + token_digest(token), self.clock()
        try:
            record = self.client.hmget(key, OWNER_FIELDS)
        except REDIS_FAILURES as error:
            raise self._unavailable(error) from error
        owner, expires_at, retired_at, last_used_at = cast(list[str | None], record)
        if retired_at is not None or (expires_at is not None and now >= int(expires_at)):
            return None
        if owner is None:
            return None
        minute = to_the_minute(now)
        used = None if last_used_at is None else int(last_used_at)
        if self.policy.is_idle(used, now):
            self.revoke(token)  # the session ends: its family goes
            return IdleSession(owner)
        if used is None or used < minute:  # once a minute: a write
            with self._answering():
                self._touch(keys=[key], args=[minute])
        return owner

    def describe(self, token: str) -> LiveToken | None:
        key, now = TOKEN_KEY_PREFIX + token_digest(token), self.clock()
        try:
            record = self.client.hmget(key, DESCRIBED_FIELDS)
        except REDIS_FAILURES as error:
            raise self._unavailable(error) from error
        owner, issued_at, expires_at, retired_at, last_used_at = cast(list[str | None], record)
        if owner is None or issued_at is None or retired_at is not None:
            return None
        expiry = None if expires_at is None else int(expires_at)
        used = None if last_used_at is None else int(last_used_at)
        if (expiry is not None and now >= expiry) or self.policy.is_idle(used, now):
            return None
        return LiveToken(owner, int(issued_at), expiry)

    def rotate(self, token: str, successor: str, username: str | None) -> Rotation:
        now, policy = self.clock(), self.policy
        idle_since = policy.idle_since(now)
        with self._answering():
            outcome, family, owner = self._call(
                self._rotate, [],
                token_digest(token), token_digest(successor), username or "", repr(now), int(now),
                policy.lifetime or "", repr(policy.reuse_grace), RETIRED_GENERATIONS_KEPT,
                PURGE_BATCH, _microseconds(now), lineage_digest(token) or "", new_session_id(),
                "" if idle_since is None else idle_since, to_the_minute(now),
            )  # fmt: skip
        return Rotation(Outcome(outcome), family[:DIGEST_PREFIX_LENGTH], owner)

    def revoke(self, token: str) -> Revocation:
        with self._answering():
            known, reused, family, username = self._call(
                self._revoke, [],
                token_digest(token), lineage_digest(token) or "", repr(self.clock()),
            )  # fmt: skip
        return Revocation(bool(known), bool(reused), family[:DIGEST_PREFIX_LENGTH], username)

    def purge_expired(self, limit: int = PURGE_BATCH) -> int:
        with self._answering():
            return self._run(self._purge, [], repr(self.clock()), limit)

    def tokens_of(self, username: str) -> list[TokenRecord]:
        self._purge_all_expired()
        with self._answering():
            digests = cast(list[str], self.client.zrange(USER_KEY_PREFIX + username, 0, -1))
            reads = self.client.pipeline(transaction=False)
            for digest in digests:
                reads.hget(TOKEN_KEY_PREFIX + digest, "issued_at")
            times = cast(list[str | None], reads.execute())  # decode_responses: text
        return [
            TokenRecord.of(digest, username, int(at))
            for digest, at in zip(digests, times, strict=True)
            if at is not None  # expired between the two reads
        ]

    def sessions_of(self, username: str, limit: int = 50, after: str | None = None) -> SessionPage:
        check_page_limit(limit)
        at, session = ("", "") if after is None else parse_session_cursor(after)
        self._migrate()
        now = self.clock()
        idle_since = self.policy.idle_since(now)
        with self._answering():
            flat = self._call(
                self._sessions, [USER_KEY_PREFIX + username], repr(now),
                "" if idle_since is None else idle_since, at, session, limit + 1,
            )  # fmt: skip
        sessions = [
            Session(flat[i], username, int(flat[i + 1]), int(flat[i + 2]), flat[i + 3], flat[i + 4])
            for i in range(0, len(flat), 5)
        ]
        return page_of(sessions, limit)

    def end_session(self, username: str, session_id: str) -> bool:
        if not is_session_id(session_id):
            return False  # no session has that id
        now = self.clock()
        idle_since = self.policy.idle_since(now)
        idle = "" if idle_since is None else idle_since
        keys = [USER_KEY_PREFIX + username]
        with self._answering():
            return bool(self._run(self._end_session, keys, session_id, repr(now), idle))

    def log_out_everywhere(self, username: str, at: int) -> int:
        with self._answering():
            return self._run(
                self._log_out_everywhere, [USER_KEY_PREFIX + username, CUTOFFS_KEY],
                username, at, repr(self.clock()),
            )  # fmt: skip

    def cutoffs(self, newer_than: int) -> dict[str, int]:
        with self._answering():
            rows = cast(
                list[tuple[str, float]],
                self.client.zrangebyscore(CUTOFFS_KEY, f"({newer_than}", "+inf", withscores=True),
            )
        return {username: int(at) for username, at in rows}

    def _migrate(self) -> None:
        """Give every token from before sessions its session (a family's one id, logged in
        at the family's first issue, its client unknown), a family per script call, then
        record the layout's version; once per store, and at once where done already."""
        if self._migrated:
            return
        with self._answering():
            version = self.client.get(SCHEMA_KEY)
            if version is None or int(version) < SCHEMA_VERSION:
                for user_key in self.client.scan_iter(USER_KEY_PREFIX + "*", count=IMPORT_BATCH):
                    for digests in batches(cast(list[str], self.client.zrange(user_key, 0, -1))):
                        self._migrate_tokens(digests)
                self.client.set(SCHEMA_KEY, SCHEMA_VERSION)
        self._migrated = True

    def _migrate_tokens(self, digests: list[str]) -> None:
        """Give the live tokens ``digests`` and their families a session, if they lack one."""
        reads = self.client.pipeline(transaction=False)
        for digest in digests:
            reads.hmget(TOKEN_KEY_PREFIX + digest, ("session", "family", "issued_at"))
        for digest, (session, family, issued_at) in zip(digests, reads.execute(), strict=True):
            if session is not None or issued_at is None:
                continue
            members, first = [digest], int(issued_at)
            if family is not None:  # the family's first issue: its login
                members = cast(list[str], self.client.zrange(FAMILY_KEY_PREFIX + family, 0, -1))
                times = self.client.pipeline(transaction=False)
                for member in members:
                    times.hget(TOKEN_KEY_PREFIX + member, "issued_at")
                first = min([first, *(int(at) for at in times.execute() if at is not None)])
                members = members or [digest]
            self._migrate_family(
                keys=[TOKEN_KEY_PREFIX + member for member in members],
                args=[new_session_id(), first, to_the_minute(self.clock())],  # the upgrade
            )

    def revoke_all(self, username: str) -> int:
        with self._answering():
            return self._run(self._revoke_all, [USER_KEY_PREFIX + username])

    def _revoke_digest(self, prefix: str) -> int:
        self._purge_all_expired()
        with self._answering():
            return self._run(self._revoke_prefix, [], prefix)

    def deny(self, digest: str, until: float) -> None:
        now = self.clock()
        if until <= now:
            return
        with self._answering():
            # the TTL counts from this host's clock, like the tokens' (module docstring)
            self.client.set(
                DENIED_KEY_PREFIX + digest, repr(until), px=max(1, math.ceil((until - now) * 1000))
            )

    def is_denied(self, *digests: str) -> bool:
        with self._answering():
            untils = cast(
                list[str | None],
                self.client.mget([DENIED_KEY_PREFIX + digest for digest in digests]),
            )
        now = self.clock()
        return any(until is not None and now < float(until) for until in untils)

    def count(self) -> int:
        self._purge_all_expired()
        with self._answering():
            return int(self.client.zcard(DIGESTS_KEY))

    def _purge_all_expired(self) -> None:
        """Purge every expired token, a batch per script call, so the indexes hold live ones."""
        while self.purge_expired(PURGE_ALL_BATCH) == PURGE_ALL_BATCH:
            pass

    def ping(self) -> None:
        with self._answering():
            self.client.ping()
        self._migrate()

    def close(self) -> None:
        self.client.close()

    def export(self) -> Iterator[Record]:
        with self._answering():
            # live tokens, each user's in order of issue (the user's sorted set)
            for user_key in self.client.scan_iter(USER_KEY_PREFIX + "*", count=IMPORT_BATCH):
                members = cast(list[str], self.client.zrange(user_key, 0, -1))
                for digests in batches(members):
                    yield from self._tokens(digests, retired=False)
            # then the retired ones, kept only to recognise their reuse
            pattern = TOKEN_KEY_PREFIX + "*"
            for keys in batches(self.client.scan_iter(pattern, count=IMPORT_BATCH)):
                digests = [key.removeprefix(TOKEN_KEY_PREFIX) for key in keys]
                yield from self._tokens(digests, retired=True)
            for key in self.client.scan_iter(DENIED_KEY_PREFIX + "*", count=IMPORT_BATCH):
                until = self.client.get(key)
                if until is not None:
                    yield DenyEntry(key.removeprefix(DENIED_KEY_PREFIX), float(until))
            ends = cast(
                list[tuple[str, float]], self.client.zrange(CUTOFFS_KEY, 0, -1, withscores=True)
            )
            for username, at in ends:
                yield Cutoff(username, int(at))

    def _tokens(self, digests: list[str], *, retired: bool) -> Iterator[StoredToken]:
        """Yield the tokens of ``digests`` that are retired, or not (one pipeline)."""
        reads = self.client.pipeline(transaction=False)
        for digest in digests:
            reads.hgetall(TOKEN_KEY_PREFIX + digest)
        for digest, fields in zip(digests, reads.execute(), strict=True):
            if fields and ("retired_at" in fields) == retired:  # else expired meanwhile
                yield _stored_token(digest, fields)

    def import_records(self, records: Iterable[Record]) -> Imported:
        now, tokens, live, denied, cutoffs = self.clock(), 0, 0, 0, 0
        sessions: dict[str, str] = {}
        #: Each user's newest score: a user's live tokens come in order of issue, and
        #: same-second ones get increasing microseconds, as the scripts give them.
        newest: dict[str, int] = {}
        with self._answering():
            for batch in batches(records):
                known = self.client.pipeline(transaction=False)
                for record in batch:
                    if isinstance(record, StoredToken):
                        known.exists(TOKEN_KEY_PREFIX + record.digest)
                found = iter(known.execute())
                writes = self.client.pipeline(transaction=True)
                for record in batch:
                    if isinstance(record, DenyEntry):
                        writes.set(
                            DENIED_KEY_PREFIX + record.digest, repr(record.until),
                            px=max(1, math.ceil((record.until - now) * 1000)),
                        )  # fmt: skip
                        denied += 1
                        continue
                    if isinstance(record, Cutoff):
                        writes.zadd(CUTOFFS_KEY, {record.username: record.at}, gt=True)
                        cutoffs += 1
                        continue
                    exists = next(found)
                    if exists:
                        continue
                    tokens += 1
                    live += record.retired_at is None
                    score = None
                    if record.retired_at is None:
                        floor = _microseconds(record.issued_at)
                        score = max(floor, newest.get(record.username, floor - 1) + 1)
                        newest[record.username] = score
                    _write_token(writes, record.with_session(sessions), score, now)
                writes.execute()
        return Imported(tokens, live, denied, cutoffs)

    def holds_anything(self) -> bool:
        with self._answering():
            keys = self.client.scan_iter("rt:*", count=IMPORT_BATCH)
            return any(key != SCHEMA_KEY for key in keys)

    def is_same_store(self, other: RefreshTokenStore) -> bool:
        # one database by any address or socket: a key written here is looked for there
        if not isinstance(other, RedisTokenStore):
            return False
        probe = COPY_PROBE_KEY_PREFIX + secrets.token_hex(16)
        with other._answering():  # a failure names the store that failed
            other.client.set(probe, "", px=60_000)  # gone by itself should the delete fail
        try:
            with self._answering():
                return bool(self.client.exists(probe))
        finally:
            with other._answering():
                other.client.delete(probe)

    @classmethod
    def _run(cls, script: Script, keys: list[str], *args: str | int) -> int:
        return int(cls._call(script, keys, *args))

    @staticmethod
    def _call(script: Script, keys: list[str], *args: str | int) -> Any:
        return script(
            keys=[DIGESTS_KEY, EXPIRING_KEY, *keys],
            args=[TOKEN_KEY_PREFIX, USER_KEY_PREFIX, FAMILY_KEY_PREFIX, LINEAGE_KEY_PREFIX, *args],
        )

    @contextmanager
    def _answering(self) -> Iterator[None]:
        """Run the block; turn every Redis failure into one BackendUnavailable."""
        try:
            yield
        except REDIS_FAILURES as error:
            raise self._unavailable(error) from error

    def _unavailable(self, error: BaseException) -> BackendUnavailable:
        return BackendUnavailable(failure_message(f"Redis store {self.location}", error))


def _stored_token(digest: str, fields: dict[str, str]) -> StoredToken:
    def number(name: str, kind: type[Any]) -> Any:
        return kind(fields[name]) if name in fields else None

    return StoredToken(
        digest, fields["username"], int(fields["issued_at"]), number("expires_at", int),
        fields.get("family"), number("generation", int), number("retired_at", float),
        fields.get("parent"), fields.get("lineage"), fields.get("session"),
        number("logged_in_at", int), number("last_used_at", int), fields.get("address"),
        fields.get("user_agent"),
    )  # fmt: skip


def _write_token(writes: Any, token: StoredToken, score: int | None, now: float) -> None:
    """Add to ``writes`` the keys of ``token`` as the scripts lay them out; ``score``: its
    place among its user's live tokens (None for a retired one)."""
    key = TOKEN_KEY_PREFIX + token.digest
    fields = {name: value for name in PLAIN_FIELDS if (value := getattr(token, name)) is not None}
    if token.retired_at is not None:
        fields["retired_at"] = repr(token.retired_at)
    writes.hset(key, mapping=fields)
    if score is not None:  # a live token: in its user's and the count's indexes
        writes.zadd(USER_KEY_PREFIX + token.username, {token.digest: score})
        writes.zadd(DIGESTS_KEY, {token.digest: 0})
    if token.family is not None:
        writes.zadd(FAMILY_KEY_PREFIX + token.family, {token.digest: token.generation or 0})
        if token.lineage is not None:  # the family known by its lineage
            lineage = {"family": token.family, "username": token.username}
            writes.hset(LINEAGE_KEY_PREFIX + token.lineage, mapping=lineage)
    if token.expires_at is not None:
        ttl = max(1, math.floor((token.expires_at - now) * 1000))
        writes.zadd(EXPIRING_KEY, {token.digest + token.username: token.expires_at})
        writes.pexpire(key, ttl)
        if token.family is not None:
            writes.pexpire(FAMILY_KEY_PREFIX + token.family, ttl)
        if token.family is not None and token.lineage is not None:
            writes.hset(LINEAGE_KEY_PREFIX + token.lineage, "expires_at", token.expires_at)
            writes.pexpire(LINEAGE_KEY_PREFIX + token.lineage, ttl)
