"""Rate limits per client address on /login, /token and DELETE /token/... (RATE_LIMIT_AUTH).

Each endpoint counts on its own, per client address as the app sees it
(``request.remote_addr``, after ``app.http.proxy``): IPv4 addresses one by one, IPv6 ones by
their /64 (what one subscriber gets), and never the networks of RATE_LIMIT_EXEMPT, unless
the address came from a trusted proxy's X-Forwarded-For (a client is never exempt by
saying it is the host itself). Anything that is not an IP address shares one counter.
The counters live where every worker and every host sees them, so N allowed per
window means at most N answered, whichever worker serves them: in the token store's
Redis (``app.backends.redis.counters``) or PostgreSQL (``app.backends.postgres.counters``, an
unlogged table), or in a SQLite file beside the token store (``app.backends.sqlite.counters``):
the counters of the app's backend (``app.backends.open_backend``).
The windows are fixed ones, each starting with a client's first request in it; a request
counts on every limit at once, in one round trip (one statement, or one Lua script),
whatever the number of limits.

``limits`` reads the notation and names the windows. Its strategies are not used:
they make a round trip per limit, and one more for the time left. Flask-Limiter is
not used either: it adds a hook to every request of every endpoint, and its
``swallow_errors`` logs a line per failed request. Here the check costs only the
three endpoints it guards, and when the counters' storage fails the limiter fails
open, for the limit only: the request goes on unchecked, the failure is counted
(``on_storage_failure``), and it is logged at most once a minute per process
(``app.backends.failures``).
"""

from __future__ import annotations

import functools
import ipaddress
import logging
from collections.abc import Callable

from flask import Flask, has_request_context, request
from limits import RateLimitItem

from app.backends.failures import BackendFailures
from app.backends.interface import BackendUnavailable, Counters, seconds_until_free, windows_of
from app.config.clock import SYSTEM_CLOCK, Clock
from app.config.parsers import IPNetwork
from app.config.settings import Settings
from app.extensions import RATE_LIMITER, backend_of, clock_of
from app.http.proxy import FORWARDED_KEY, parse_address
from app.http.request_log import note
from app.limits.login_failures import init_client_failure_limit, init_login_failure_limit

#: Distinct client addresses whose key each process remembers.
KEYS_CACHED = 4096
#: The one counter of every request whose address is missing or not an IP address.
UNKNOWN_CLIENT = "unknown"

logger = logging.getLogger(__name__)


def note_failure() -> None:
    """Count the failure on the request's line, for the metrics: ``on_storage_failure``."""
    note(rate_limit_error="1")


class RateLimiter:
    """The limits of one app: ``check`` counts a request and says whether it may go on."""

    def __init__(
        self,
        limits: tuple[RateLimitItem, ...],
        exempt: tuple[IPNetwork, ...],
        storage: Counters,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.limits = limits
        #: Each limit's amount, window in seconds, and the end of its counters' keys.
        self.windows = windows_of(limits)
        self.exempt = exempt
        self.storage = storage
        #: Called once for each request let through unchecked because the storage failed:
        #: point it at a metrics counter. ``storage_failures`` counts them too.
        self.on_storage_failure: Callable[[], None] = note_failure
        self.storage_failures = 0
        self.failures = BackendFailures(clock.monotonic)
        self.client_key = functools.lru_cache(maxsize=KEYS_CACHED)(self._client_key)

    def check(
        self, endpoint: str, address: str | None, forwarded: bool | None = None
    ) -> int | None:
        """Count a request to ``endpoint`` from ``address``: None if it may go on, else
        the seconds until the window that refused it frees (at least 1).

        ``forwarded``: whether ``address`` came from X-Forwarded-For, which no exemption
        covers; None reads it from the current request.
        """
        key, exempt = self.client_key(address)
        if exempt:
            if forwarded is None:
                forwarded = has_request_context() and FORWARDED_KEY in request.environ
            if not forwarded:
                return None
        if self.failures.waiting():
            self._storage_failed(None)
            return None
        counters = [(f"{endpoint}/{key}{suffix}", window) for _, window, suffix in self.windows]
        try:
            counted = self.storage.hit(counters)
        except BackendUnavailable as error:
            self._storage_failed(error)
            return None
        if self.failures.failing:
            self._recovered()
        return seconds_until_free(self.windows, counted)

    def _client_key(self, address: str | None) -> tuple[str, bool]:
        """Return whom an address counts as, and whether it is exempt; cached per address."""
        ip = parse_address(address) if address else None  # ::ffff:192.0.2.1 is 192.0.2.1
        if ip is None:
            return UNKNOWN_CLIENT, False  # never a counter per made-up value
        exempt = any(ip in network for network in self.exempt)
        if ip.version == 6:  # one subscriber's prefix, not each of its 2**64 addresses
            return str(ipaddress.IPv6Network((ip, 64), strict=False)), exempt
        return str(ip), exempt

    def _storage_failed(self, error: Exception | None) -> None:
        """Let the request through, count it, and log it at most once a minute."""
        self.storage_failures += 1
        self.on_storage_failure()
        unreported = self.failures.failed(tried=error is not None)
        if unreported is None:
            return
        logger.warning(
            "rate limits not applied, their storage failed: %s%s",
            error or "still failing",
            f" ({unreported} more requests unchecked since the last message)" if unreported else "",
        )

    def _recovered(self) -> None:
        unreported = self.failures.recovered()
        if unreported is None:
            return
        logger.warning(
            "rate limits applied again, their storage answers (%d more requests were"
            " unchecked since the last message)",
            unreported,
        )


def init_rate_limit(app: Flask, settings: Settings) -> None:
    """Attach the rate limiter to ``app``, or None with RATE_LIMIT_AUTH=off."""
    limiter = None
    if settings.rate_limit_auth:
        counters = backend_of(app).counters  # the store's backend, on its connections
        limiter = RateLimiter(
            settings.rate_limit_auth, settings.rate_limit_exempt, counters, clock_of(app)
        )
    app.extensions[RATE_LIMITER] = limiter
    init_login_failure_limit(app, settings)
    init_client_failure_limit(app, settings)
