"""What every backend implements: the refresh-token store and the rate limits' counters,
the one object that holds both (``Backend``), the records a store is copied as, and the
one error any of them raises when it cannot answer.

The family rules the stores keep are stated, and checked on every backend, in the
docstring of tests/backends/test_store.py; the counters' in tests/backends/test_counters.py.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from itertools import islice
from typing import Protocol, TypeVar

from limits import RateLimitItem

from app.auth.tokens import REFRESH_TOKEN_LENGTH, new_refresh_token
from app.config.clock import SYSTEM_CLOCK, Clock

#: How many hex characters of a digest are shown to operators.
DIGEST_PREFIX_LENGTH = 12
HEX_DIGITS = frozenset("0123456789abcdef")
#: Expired tokens forgotten at most per issue or rotation: a bounded, indexed purge.
PURGE_BATCH = 16
#: Tokens an import writes per transaction (``RefreshTokenStore.import_records``).
IMPORT_BATCH = 1000
#: Generations of retired tokens a family keeps whole, for the grace's retries; an older
#: one is still recognised by its lineage (below), so its reuse revokes the family.
RETIRED_GENERATIONS_KEPT = 20
#: Characters a rotated token hands down to its successor: the family's *lineage*. A
#: family keeps the digest of its lineage while it lives, so any of its tokens, however
#: old, is known as one of its own. The other 26 characters of a successor are fresh.
LINEAGE_LENGTH = 16

T = TypeVar("T")


class BackendUnavailable(Exception):  # noqa: N818  # the name says what the caller meets
    """The backend cannot be reached or did not answer in time; the message names the
    cause, never a password. Each caller has its policy: the store's routes answer 503,
    the address limit lets the request pass, the failed-login limit refuses the login."""


@dataclass(frozen=True)
class TokenRecord:
    """What an operator may see of a stored refresh token: never the token itself."""

    digest_prefix: str
    username: str
    issued_at: int

    @classmethod
    def of(cls, digest: str, username: str, issued_at: int) -> TokenRecord:
        """Return the record of a stored digest, showing only its first hex digits."""
        return cls(digest[:DIGEST_PREFIX_LENGTH], username, issued_at)


@dataclass(frozen=True)
class Issued:
    """The answer of ``RefreshTokenStore.issue``."""

    #: The user's cut-off (``log_out_everywhere``), or None, read in the same step.
    cutoff: int | None
    #: How many of the user's sessions ``policy.per_user`` ended to make room.
    ended: int = 0


@dataclass(frozen=True)
class LiveToken:
    """What introspection tells of a live refresh token: whose, since when, until when."""

    username: str
    issued_at: int
    expires_at: int | None  # None: the token has no lifetime (REFRESH_TOKEN_LIFETIME unset)


@dataclass(frozen=True)
class RefreshTokenPolicy:
    """How long refresh tokens live and how many a user holds; the defaults are SPEC.md's."""

    #: Seconds from issue until a token is unknown; None: valid until revoked.
    lifetime: int | None = None
    #: Live tokens one username may hold; issuing one more forgets the oldest. 0: no limit.
    per_user: int = 0
    #: Seconds after its rotation in which a retired token may be rotated again,
    #: while its successor is unused; 0: never (its reuse revokes the family).
    reuse_grace: float = 0.0
    #: Seconds a session may go unused before it is refused and removed (counted from
    #: the end of the minute of its last use, so it may end up to a minute late, never
    #: early); None: never.
    idle_timeout: int | None = None

    def idle_since(self, now: float) -> int | None:
        """Return the last use (to the minute) at or before which a session is idle at
        ``now``, or None without an idle timeout. A last use is kept to its minute's
        start, so the minute's end counts: a session used within the timeout is never
        refused, whatever second of its minute the use came at."""
        return None if self.idle_timeout is None else int(now) - self.idle_timeout - 60

    def is_idle(self, last_used_at: int | None, now: float) -> bool:
        """Return whether a session last used at ``last_used_at`` (None: never) is idle."""
        idle_since = self.idle_since(now)
        return idle_since is not None and last_used_at is not None and last_used_at <= idle_since


class Outcome(Enum):
    """What presenting a refresh token for rotation did."""

    ROTATED = "rotated"  # retired; its successor is the family's live token
    RETRIED = "retried"  # retired already, within the grace: the unused successor replaced
    REUSED = "reused"  # retired already: the whole family is revoked
    UNKNOWN = "unknown"  # never issued, revoked, expired or forgotten
    OTHER_USER = "other_user"  # live, but recorded for another username
    IDLE = "idle"  # live, but its session unused too long: the session ended just now


@dataclass(frozen=True)
class IdleSession:
    """What ``owner_of`` answers for a live token whose session was idle: removed just now."""

    owner: str


@dataclass(frozen=True)
class Rotation:
    """The answer of ``RefreshTokenStore.rotate``."""

    outcome: Outcome
    #: The start of the family's digest (its first token's), for logs; "" if unknown.
    family: str = ""
    #: The token's owner when rotated, retried, reused or idle; "" otherwise.
    owner: str = ""

    @property
    def succeeded(self) -> bool:
        """Return whether the successor was recorded and may be handed out."""
        return self.outcome in (Outcome.ROTATED, Outcome.RETRIED)


@dataclass(frozen=True)
class Revocation:
    """The answer of ``RefreshTokenStore.revoke``."""

    #: Whether a token was forgotten: the one named, or the family it belonged to.
    known: bool
    #: A retired member of a family, or an older one the family forgot: the whole family
    #: was revoked, and someone held an old token (RFC 9700, 4.14.2).
    reused: bool = False
    #: The start of the family's digest, for logs; "" for a token never rotated.
    family: str = ""
    #: The username of the token (or family) forgotten; "" if nothing was.
    username: str = ""


#: Characters of the User-Agent a session keeps.
USER_AGENT_LENGTH = 256
#: Sessions ``sessions_of`` returns per page at most.
MAX_SESSION_PAGE = 1000


@dataclass(frozen=True)
class LoginClient:
    """What the service saw of the client at login."""

    #: The client address, as the request log reads it; "" when unknown.
    address: str = ""
    #: The User-Agent header as sent: the store keeps its first ``USER_AGENT_LENGTH``
    #: characters, as text, never interpreted.
    user_agent: str = ""

    def kept(self) -> LoginClient:
        """Return the client as every store keeps it: the User-Agent cut to its length,
        and text any store holds (a NUL, which PostgreSQL's text refuses, and an unpaired
        surrogate, which UTF-8 cannot encode, replaced)."""
        return LoginClient(
            _storable(self.address[:USER_AGENT_LENGTH]),
            _storable(self.user_agent[:USER_AGENT_LENGTH]),
        )


def _storable(text: str) -> str:
    """Return ``text`` with what some store cannot hold replaced."""
    return text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")


#: The client of a login nobody saw (a command, an older record).
UNKNOWN_CLIENT = LoginClient()


@dataclass(frozen=True)
class Session:
    """One login and every token rotated from it (a refresh-token family)."""

    #: Random and url-safe (``new_session_id``): not derivable from any token, stable
    #: across rotations.
    id: str
    username: str
    #: Seconds since the epoch.
    logged_in_at: int
    #: Seconds since the epoch, to the minute (a multiple of 60).
    last_used_at: int
    address: str
    user_agent: str


@dataclass(frozen=True)
class SessionPage:
    """A page of ``sessions_of``: newest login first, ties broken by id."""

    sessions: list[Session]
    #: The opaque cursor of the next page (``after``); None on the last page.
    next: str | None


def new_session_id() -> str:
    """Return a new session id: over 128 random bits, url-safe, never beginning with "-",
    which a command line (``flask sessions end USER ID``) would take for an option."""
    while (session_id := secrets.token_urlsafe(17)).startswith("-"):
        pass
    return session_id


def to_the_minute(now: float) -> int:
    """Return the start of the minute of ``now``: a session's last use as kept."""
    seconds = int(now)
    return seconds - seconds % 60


#: The characters of a session id: url-safe base64's (new ids) and hex (migrated ones).
SESSION_ID_CHARACTERS = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
)
#: The longest session id (a PostgreSQL migration's: 64 hex digits).
MAX_SESSION_ID_LENGTH = 64


def is_session_id(text: str) -> bool:
    """Return whether ``text`` has the shape of a session id (else it names none, and
    costs the store no look-up)."""
    return 0 < len(text) <= MAX_SESSION_ID_LENGTH and set(text) <= SESSION_ID_CHARACTERS


def session_cursor(session: Session) -> str:
    """Return the cursor of the page after ``session`` (its login time and id)."""
    return f"{session.logged_in_at}.{session.id}"


def parse_session_cursor(after: str) -> tuple[int, str]:
    """Return the login time and id a cursor names; ValueError if it names none."""
    at, dot, session_id = after.partition(".")
    if not (dot and at.isascii() and at.isdigit() and len(at) <= 12 and is_session_id(session_id)):
        raise ValueError("not a cursor of sessions_of")
    return int(at), session_id


def page_of(sessions: list[Session], limit: int) -> SessionPage:
    """Return the page of the first ``limit`` of ``sessions`` (read with one more, to know
    whether a next page exists)."""
    if len(sessions) > limit:
        return SessionPage(sessions[:limit], session_cursor(sessions[limit - 1]))
    return SessionPage(sessions, None)


def check_page_limit(limit: int) -> None:
    """Raise ValueError unless ``limit`` is a page size ``sessions_of`` serves."""
    if not 1 <= limit <= MAX_SESSION_PAGE:
        raise ValueError(f"a page holds 1 to {MAX_SESSION_PAGE} sessions")


def token_digest(token: str) -> str:
    """Return the SHA-256 hex digest under which a refresh token is stored."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def lineage_digest(token: str) -> str | None:
    """Return the digest of the lineage a token carries: of its first characters.

    None for a value of another shape than the service's refresh tokens: it names no
    family, and costs the store no look-up.
    """
    if len(token) != REFRESH_TOKEN_LENGTH or not (token.isascii() and token.isalnum()):
        return None
    return token_digest(token[:LINEAGE_LENGTH])


def successor_of(token: str) -> str:
    """Return a new refresh token to replace ``token`` in a rotation: its lineage, then
    fresh random letters (a fresh token if ``token`` is of no refresh token's shape)."""
    fresh = new_refresh_token()
    if lineage_digest(token) is None:
        return fresh
    return token[:LINEAGE_LENGTH] + fresh[LINEAGE_LENGTH:]


def batches(items: Iterable[T], size: int = IMPORT_BATCH) -> Iterator[list[T]]:
    """Yield ``items`` in lists of ``size`` (the last one shorter)."""
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


def shown_digest(token: str) -> str:
    """Return the start of a token's digest: what logs and operators see of a token."""
    return token_digest(token)[:DIGEST_PREFIX_LENGTH]


@dataclass(frozen=True)
class StoredToken:
    """What every backend records of one refresh token: a record of ``export``.

    Live tokens come first in an export, each user's in order of issue (``sequence`` and
    the digest break a second's ties), so that an import keeps that order.
    """

    digest: str
    username: str
    issued_at: int
    expires_at: int | None = None
    family: str | None = None
    generation: int | None = None
    retired_at: float | None = None
    parent: str | None = None
    lineage: str | None = None
    #: The token's session (every token of a family carries its family's); None on a
    #: record of a store from before sessions: the import makes it a session of its own,
    #: logged in at ``issued_at``, its client unknown.
    session: str | None = None
    logged_in_at: int | None = None
    last_used_at: int | None = None
    address: str | None = None
    user_agent: str | None = None

    def unexpired_at(self, now: float) -> bool:
        """Return whether the token is still to expire at ``now`` (or never will)."""
        return self.expires_at is None or self.expires_at > now

    def with_session(self, sessions: dict[str, str]) -> StoredToken:
        """Return the record with its session: its own, or for a record from before
        sessions, one per family (kept in ``sessions``), logged in at its issue, its
        client unknown."""
        if self.session is not None:
            return self
        family = self.family or self.digest
        session = sessions.setdefault(family, new_session_id())
        return replace(
            self,
            session=session,
            logged_in_at=self.issued_at,
            last_used_at=to_the_minute(self.issued_at),
            address="",
            user_agent="",
        )


@dataclass(frozen=True)
class DenyEntry:
    """A deny entry (``RefreshTokenStore.deny``): a record of ``export``."""

    digest: str
    until: float

    def unexpired_at(self, now: float) -> bool:
        """Return whether the entry still denies at ``now``."""
        return self.until > now


@dataclass(frozen=True)
class Cutoff:
    """A user's cut-off (``RefreshTokenStore.log_out_everywhere``): a record of ``export``."""

    username: str
    at: int

    def unexpired_at(self, now: float) -> bool:
        """Return True: a cut-off is copied while the store keeps it."""
        return True


#: What ``export`` yields and ``import_records`` takes.
Record = StoredToken | DenyEntry | Cutoff


@dataclass(frozen=True)
class Imported:
    """What ``import_records`` wrote: tokens (of which live ones), deny entries and
    cut-offs. The target is empty (``flask tokens copy`` checks it first), so every record
    is written."""

    tokens: int = 0
    live: int = 0
    denied: int = 0
    cutoffs: int = 0


class RefreshTokenStore(ABC):
    """Refresh tokens by digest, each recorded with the username it was issued to.

    Every method is atomic on its own and safe to call from any process or
    thread. A backend raises BackendUnavailable, and nothing else, when it
    cannot answer.

    The rules of families (rotation, reuse, the grace, lineages, the per-user limit,
    expiry) are stated once, in the docstring of tests/backends/test_store.py, the suite
    every backend passes.
    """

    #: Whether the store lives apart from the service and may be down when it starts
    #: (a SQLite file is checked with the settings, and opened on first use).
    remote = False
    #: Where the store is, for messages and logs: never a password.
    location = ""

    def __init__(
        self, policy: RefreshTokenPolicy | None = None, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.policy = policy or RefreshTokenPolicy()
        #: The app's clock: ``clock()`` is the time the records carry.
        self.clock = clock

    @abstractmethod
    def issue(self, token: str, username: str, client: LoginClient | None = None) -> Issued:
        """Record a newly issued refresh token for ``username``, under the policy, as a new
        session of ``client`` (its User-Agent cut to ``USER_AGENT_LENGTH``); return the
        user's cut-off (``log_out_everywhere``), or None, read in the same step, so that a
        login can wait out the cut-off's second before it mints an access token.

        With ``policy.per_user``, the user's oldest live tokens (by issue, or last
        rotation) are forgotten in the same step, so that no more than that many live, and
        how many sessions so ended is returned too (each end is a security event).
        """

    @abstractmethod
    def sessions_of(self, username: str, limit: int = 50, after: str | None = None) -> SessionPage:
        """Return a page of the live sessions of ``username``: newest login first, ties
        broken by id, from the cursor ``after`` (a page's ``next``), at most ``limit``
        (1 to ``MAX_SESSION_PAGE``). Read through an index by username: its cost does not
        grow with the other users' tokens. ValueError for a cursor or a limit no page has.
        """

    @abstractmethod
    def end_session(self, username: str, session_id: str) -> bool:
        """Revoke every token of that session; False when ``username`` has no live session
        of that id (another user's id is exactly like an unknown one), or an idle one
        (``policy.idle_timeout``: not listed, and removed all the same)."""

    @abstractmethod
    def log_out_everywhere(self, username: str, at: int) -> int:
        """Revoke every refresh token of ``username`` whose session began at or before
        ``at`` (whole seconds), and raise the user's cut-off to ``at``, in one step; return
        how many live sessions ended. Idempotent: when the cut-off is already ``at`` or
        later, nothing is revoked (so that a login made since is kept), and 0 returned."""

    @abstractmethod
    def cutoffs(self, newer_than: int) -> dict[str, int]:
        """Return every user's cut-off later than ``newer_than`` (older ones no longer
        matter: every access token they refuse has expired; the store may forget them)."""

    @abstractmethod
    def owner_of(self, token: str) -> str | IdleSession | None:
        """Return the username a live (not retired, not expired, not idle) token was issued
        to, or None. A use: the session's last use is written, at most once a minute; an
        idle session (``policy.idle_timeout``) is removed, and its owner returned as an
        ``IdleSession``: that end of a session is a security event for the caller to log."""

    @abstractmethod
    def describe(self, token: str) -> LiveToken | None:
        """Return what ``owner_of`` would accept of ``token``, or None, with no write: a
        look from outside (introspection) is no use of the session, and an idle session
        is left for its next use to remove."""

    @abstractmethod
    def rotate(self, token: str, successor: str, username: str | None) -> Rotation:
        """Retire ``token`` of ``username`` (None: of whoever owns it, the OAuth refresh
        grant's case, which names no user) and record ``successor`` in its family, atomically.

        ``successor`` is ``successor_of(token)``, so that it carries the family's lineage.
        Of several calls with one token, one rotates it; the others find it retired
        and revoke its whole family (RFC 9700, 4.14.2), unless ``policy.reuse_grace``
        lets them replace the still unused successor. A token the family forgot, known
        by its lineage, is reuse too. The successor inherits the family's expiry:
        ``policy.lifetime`` counts from the login, and its session, used now. An idle
        session (``policy.idle_timeout``) is removed, and the outcome ``IDLE``.
        """

    @abstractmethod
    def revoke(self, token: str) -> Revocation:
        """Forget the refresh token, and with it its whole family, if it has one.

        Its family's live token ends the family (a logout); a retired one, or an older
        one the family knows by its lineage, ends it too, and is reuse: only a holder
        of an old token can name it, and that holder may be a thief erasing the trace
        of a theft.
        """

    @abstractmethod
    def purge_expired(self, limit: int = PURGE_BATCH) -> int:
        """Forget up to ``limit`` expired tokens, through an index; return how many."""

    @abstractmethod
    def tokens_of(self, username: str) -> list[TokenRecord]:
        """Return the records of every live refresh token of ``username``, oldest first."""

    @abstractmethod
    def revoke_all(self, username: str) -> int:
        """Forget every refresh token of ``username``; return how many were live."""

    def revoke_digest(self, digest_prefix: str) -> int:
        """Forget the one live token whose digest starts with ``digest_prefix``; return 1 or 0."""
        prefix = digest_prefix.lower()
        if not 0 < len(prefix) <= 64 or not set(prefix) <= HEX_DIGITS:
            return 0  # no digest starts so
        return self._revoke_digest(prefix)

    @abstractmethod
    def _revoke_digest(self, prefix: str) -> int:
        """Do ``revoke_digest`` for a prefix of 1 to 64 lowercase hex digits."""

    @abstractmethod
    def deny(self, digest: str, until: float) -> None:
        """Refuse the signed token that the caller names by ``digest`` until ``until``.

        For tokens the service cannot otherwise take back (the cookie token of a
        logout): the entry is kept until ``until`` (seconds since the epoch), then
        forgotten. A time already past denies nothing.
        """

    @abstractmethod
    def is_denied(self, *digests: str) -> bool:
        """Return whether ``deny`` refused any of ``digests`` until a time still to come.

        One round trip however many digests: a token may be named several ways.
        """

    @abstractmethod
    def count(self) -> int:
        """Return how many live refresh tokens are stored."""

    @abstractmethod
    def ping(self) -> None:
        """Return if the store answers, else raise BackendUnavailable."""

    @abstractmethod
    def export(self) -> Iterator[Record]:
        """Yield every token the store holds (expired and retired ones too: the caller
        chooses), live ones first, each user's in order of issue, then every deny entry,
        then every cut-off; one moment of the store as far as the backend allows."""

    @abstractmethod
    def import_records(self, records: Iterable[Record]) -> Imported:
        """Write ``records`` (from any backend's ``export``), a batch per transaction, so
        that each token behaves as it did; a digest the store holds already is left alone.
        The live tokens' order of issue is the order given."""

    @abstractmethod
    def holds_anything(self) -> bool:
        """Return whether the store holds any token or deny entry, even an expired one."""

    @abstractmethod
    def is_same_store(self, other: RefreshTokenStore) -> bool:
        """Return whether ``other`` reaches the very data of this store, however its
        place is spelled (the stores are asked, not their URLs compared)."""

    @abstractmethod
    def close(self) -> None:
        """Release this process's connections (they are reopened on next use)."""


# --- the rate limits' counters ---------------------------------------------------------


#: A limit as the counters use it: its amount, its window in seconds, and its keys' end.
Window = tuple[int, int, str]


def windows_of(limits: Sequence[RateLimitItem]) -> list[Window]:
    """Return each limit's amount, window in seconds, and the end of its counters' keys."""
    return [
        (item.amount, item.get_expiry(), f"/{item.amount}/{item.get_expiry()}") for item in limits
    ]


def seconds_until_free(
    windows: Sequence[Window], counted: Sequence[tuple[int, float]]
) -> int | None:
    """Return None if every count is within its limit, else the whole seconds (at least 1)
    until the last window that refused frees."""
    waits = [
        left for (amount, _, _), (hits, left) in zip(windows, counted, strict=True) if hits > amount
    ]
    return max(1, math.ceil(max(waits))) if waits else None


class Counters(Protocol):
    """Where the windows are counted: each backend's ``counters`` module."""

    def hit(self, counters: Sequence[tuple[str, int]]) -> list[tuple[int, float]]:
        """Count one hit on each (key, window in seconds); return each one's hits and the
        seconds until its window ends. Raise BackendUnavailable on any failure."""

    def forgive(self, keys: Sequence[str]) -> None:
        """Take back one hit from each running counter of ``keys`` (LOGIN_FAILURE_LIMIT's
        successful logins). Raise BackendUnavailable on any failure."""

    def close(self) -> None:
        """Release this process's connections."""


@dataclass(frozen=True, eq=False)
class Backend:
    """One backend of the service: its refresh-token store and its counters, which share
    its connections (``app.backends.open_backend``)."""

    store: RefreshTokenStore
    counters: Counters

    def close(self) -> None:
        """Release this process's connections (reopened on next use)."""
        self.store.close()
        self.counters.close()
