"""Each worker's copy of the users' cut-offs (``RefreshTokenStore.log_out_everywhere``),
so that an access token issued at or before its user's cut-off is refused without a store
read per request.

The copy is brought up to date from the shared store at most every
SESSION_CUTOFF_REFRESH seconds, by the first request that finds it due. The others go on
with the cut-offs known meanwhile while those were read less than SESSION_CUTOFF_REFRESH
seconds ago (and a second's grace for the read under way); a copy older than that (a
worker idle for a while) waits for the read. A logout everywhere made on this worker is
in its copy at once; one made elsewhere is here within SESSION_CUTOFF_REFRESH seconds.
If the store cannot be read, the cut-offs known stay in force (nobody waits for a read
that keeps failing), and the failure is logged at most once a minute.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable

from app.backends.failures import BackendFailures
from app.backends.interface import BackendUnavailable, RefreshTokenStore
from app.config.clock import Clock

logger = logging.getLogger(__name__)
#: Seconds a copy may outlive the refresh interval while a read is under way (a read takes
#: milliseconds): an older copy waits for the read, a younger one goes on meanwhile.
READ_GRACE = 1.0


class CutoffCache:
    """The cut-offs this worker knows, and the one way to log a user out everywhere."""

    def __init__(
        self, store: RefreshTokenStore, clock: Clock, refresh_every: float, horizon: int
    ) -> None:
        """``horizon``: seconds after which a cut-off refuses nothing more (the access
        tokens' lifetime and the clock skew): older ones are neither read nor kept."""
        self.store = store
        self.clock = clock
        self.refresh_every = refresh_every
        self.horizon = horizon
        #: Replaced whole, never changed in place: readers take no lock.
        self._known: dict[str, int] = {}
        self._due = clock.monotonic()  # the first request reads them
        #: When the read that gave ``_known`` began (monotonic); none yet.
        self._read_at = -math.inf
        self._refreshing = threading.Lock()
        self._writing = threading.Lock()
        self._failures = BackendFailures(clock.monotonic)
        #: Called before each read of the store: the user directory's look at USERS_FILE,
        #: so that a file edited by hand logs its changed users out within the bound even
        #: when no login or refresh comes to read it.
        self.before_refresh: Callable[[], None] | None = None

    def refuses(self, username: str, issued_at: int) -> bool:
        """Return whether the user's cut-off refuses a token issued at ``issued_at``."""
        self._bring_up_to_date()
        cutoff = self._known.get(username)
        return cutoff is not None and issued_at <= cutoff

    def cutoff_of(self, username: str) -> int | None:
        """Return the user's cut-off this worker knows, or None."""
        self._bring_up_to_date()
        return self._known.get(username)

    def _bring_up_to_date(self) -> None:
        """Read the cut-offs when due, unless another thread is at it: then go on with the
        copy, or, when it was read longer than the bound (and ``READ_GRACE``) ago, as on a
        worker idle for a while, wait for that read (the store's timeout bounds it). Nobody
        waits while reads fail, nor at each read when it is due."""
        now = self.clock.monotonic()
        stale = now - self._read_at > self.refresh_every + READ_GRACE and not self._failures.failing
        if now < self._due and not stale:
            return
        if stale:
            taken = self._refreshing.acquire(timeout=max(1.0, self.refresh_every))
        else:
            taken = self._refreshing.acquire(blocking=False)
        if not taken:
            return
        try:
            if self.clock.monotonic() >= self._due:  # else read by the thread waited for
                self._refresh()
        finally:
            self._refreshing.release()

    def log_out_everywhere(self, username: str, at: int | None = None) -> int:
        """Log ``username`` out everywhere as of ``at`` (now by default): end every session
        begun by then and raise the cut-off, in the store and in this worker's copy at once;
        return how many sessions ended. Raise BackendUnavailable if the store cannot."""
        at = int(self.clock()) if at is None else at
        ended = self.store.log_out_everywhere(username, at)
        self._raise(username, at)
        return ended

    def wait_out(self, username: str, cutoff: int | None = None) -> bool:
        """Before an access token of ``username`` is minted: if the user's cut-off (as read
        with a login's refresh token, ``cutoff``, or as this worker knows it) is the current
        second, wait for the next one, so that the token is not refused as soon as issued.
        Return whether it waited: what was checked before may have changed meanwhile."""
        if cutoff is not None:
            self._raise(username, cutoff)
        known = self.cutoff_of(username)
        now = self.clock()
        if known is not None and int(now) == known:
            self.clock.sleep(known + 1 - now)
            return True
        return False

    def _raise(self, username: str, cutoff: int) -> None:
        with self._writing:
            known = self._known.get(username)
            if known is None or known < cutoff:
                self._known = {**self._known, username: cutoff}

    def _refresh(self) -> None:
        """Read the cut-offs newer than the horizon (under ``_refreshing``)."""
        started = self.clock.monotonic()
        self._due = started + self.refresh_every
        if self.before_refresh is not None:
            self.before_refresh()
        oldest = int(self.clock()) - self.horizon
        try:
            fresh = self.store.cutoffs(oldest)
        except BackendUnavailable as error:
            self._failed(error)
            return
        self._recovered()
        with self._writing:  # a copy, then one assignment
            known = {user: at for user, at in self._known.items() if at > oldest}
            for user, at in fresh.items():
                if known.get(user, at) <= at:
                    known[user] = at
            self._known = known
        self._read_at = started

    def _failed(self, error: BackendUnavailable) -> None:
        unreported = self._failures.failed(tried=True)
        if unreported is None:
            return  # reported less than a minute ago
        logger.warning(
            "users' cut-offs not read, the known ones stay in force: %s%s",
            error,
            f" ({unreported} more failed reads since the last message)" if unreported else "",
        )

    def _recovered(self) -> None:
        if self._failures.recovered() is not None:
            logger.warning("users' cut-offs read again")
