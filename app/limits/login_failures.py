"""LOGIN_FAILURE_LIMIT: failed password checks per username, shared by every worker and host.

RATE_LIMIT_AUTH counts per address, so many addresses can guess one account's
password together; this counts per username, whoever asks. It applies only with a
user directory (USERS_FILE), where a login checks a password.

An attempt is counted *before* its password is checked, in one atomic hit on the
counters of every window (the app's backend's: the SQLite counters file, or the
token store's Redis or PostgreSQL): concurrent guesses cannot all read "under the limit" and all
be checked. Over the limit, the login is refused before any Argon2 is spent, for a
known username as for an unknown one. A check that succeeds takes its hit back, so
only failures count: a user who logs in often is never limited by their own logins.

Counters are keyed by an HMAC of the username, never the name itself: a username field
sometimes holds a password typed in the wrong place. The HMAC's key is the current
signing key, which every host must share: SIGNING_SECRET with HS256, the private key of
SIGNING_KEY_FILE with EdDSA or ES256. Not SIGNING_SECRET there: unset, each host
generates its own, and N hosts would count N times the guesses.

Device cookies (OWASP's "Slow Down Online Guessing Attacks with Device Cookies"): each
successful login sets a cookie, a random nonce and its HMAC bound to the username and
the user's password hash. A login that presents a valid one for its username counts on
the counters of that cookie, not on the username's: a username locked by guesses from
elsewhere stays open to the browsers its user logged in with, each held to the same
limit on its own. Guessers have no valid cookie (one is minted only by a right
password), so they stay held to the username's counters, and nothing is reopened to
them; a new password ends every cookie minted before it, so a thief's cookies, however
many, do not outlive the reset.

When the counters' storage fails, this limit fails *closed*, unlike RATE_LIMIT_AUTH:
it guards a password, not capacity, and with it off an attacker could guess at full
speed for as long as the storage stays down (with Redis or PostgreSQL, the token store is
the same server, so a login could not complete anyway). Logins are then answered 503 until the
storage answers again; the failure is logged at most once a minute per process
(``app.backends.failures``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
import secrets
from typing import NoReturn

from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from flask import Flask
from limits import RateLimitItem

from app.auth.keys import KeyRing
from app.backends.failures import BackendFailures
from app.backends.interface import BackendUnavailable, Counters, seconds_until_free, windows_of
from app.config.clock import SYSTEM_CLOCK, Clock
from app.config.settings import HS256, Settings
from app.extensions import (
    CLIENT_FAILURE_LIMIT,
    KEY_RING,
    LOGIN_FAILURE_LIMIT,
    backend_of,
    clock_of,
)

#: The start of every counter's key, beside the rate limits' ``<endpoint>/<address>/...``.
KEY_PREFIX = "login_failures/"
#: The start of a device cookie's counters' keys (a username's are hex digits after it).
DEVICE_KEY_PREFIX = KEY_PREFIX + "device/"
#: The device cookie: set at each successful login, sent back to /login only.
DEVICE_COOKIE = "login_device"
#: Seconds a device cookie lives in the browser; each successful login sets a new one.
DEVICE_COOKIE_LIFETIME = 365 * 24 * 3600
#: A device cookie's value: a 128-bit nonce and a 128-bit HMAC, base64url without padding.
DEVICE_COOKIE_VALUE = re.compile(r"([A-Za-z0-9_-]{22})\.([A-Za-z0-9_-]{22})")

logger = logging.getLogger(__name__)


class LoginFailureLimit:
    """The per-username limit of one app: ``attempt`` before a password check, ``succeeded``
    after one that passed."""

    def __init__(
        self,
        limits: tuple[RateLimitItem, ...],
        storage: Counters,
        secret: bytes,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.limits = limits
        #: Each limit's amount, window in seconds, and the end of its counters' keys.
        self.windows = windows_of(limits)
        self.storage = storage
        self._key = hmac.new(secret, b"login failure counters", hashlib.sha256).digest()
        self._device_key = hmac.new(secret, b"login device cookies", hashlib.sha256).digest()
        self.failures = BackendFailures(clock.monotonic)

    def attempt(self, username: str, device: str | None = None) -> int | None:
        """Count a password check about to be spent on ``username``: None if it may go on,
        else the seconds until the window that refused it frees (at least 1).

        ``device``: the nonce of a valid device cookie (``device_of``), whose counters
        count the check instead of the username's. Raise BackendUnavailable when
        the counters do not answer (refuse the login).
        """
        if self.failures.waiting():
            self._failed(None)
        keys = self.keys(username) if device is None else self.device_keys(device)
        try:
            counted = self.storage.hit(
                [(key, window) for key, (_, window, _) in zip(keys, self.windows, strict=True)]
            )
        except BackendUnavailable as error:
            self._failed(error)
        if self.failures.failing:
            self._recovered()
        return seconds_until_free(self.windows, counted)

    def succeeded(self, username: str, device: str | None = None) -> None:
        """Take back the attempt counted for ``username``'s check, which passed."""
        try:
            self.storage.forgive(
                self.keys(username) if device is None else self.device_keys(device)
            )
        except BackendUnavailable as error:  # the user is in; one failure too many
            logger.warning("login failure limit: a success not taken back: %s", error)

    def keys(self, username: str) -> list[str]:
        """Return the counters' keys of ``username``, one per window."""
        name = username.encode("utf-8", "surrogatepass")  # JSON may carry a lone surrogate
        digest = hmac.new(self._key, name, hashlib.sha256).hexdigest()[:32]
        return [f"{KEY_PREFIX}{digest}{suffix}" for _, _, suffix in self.windows]

    def device_keys(self, device: str) -> list[str]:
        """Return the counters' keys of the device cookie whose nonce is ``device``."""
        digest = hashlib.sha256(device.encode()).hexdigest()[:32]
        return [f"{DEVICE_KEY_PREFIX}{digest}{suffix}" for _, _, suffix in self.windows]

    def device_cookie(self, username: str, hashed: str) -> str:
        """Return a new device cookie's value for a browser that just logged in as
        ``username``, whose password hash is ``hashed``."""
        nonce = base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode()
        return f"{nonce}.{self._device_mac(nonce, username, hashed)}"

    def device_of(self, username: str, hashed: str | None, cookie: str | None) -> str | None:
        """Return the nonce of ``cookie`` if a login of ``username`` was given it while the
        user's password hash was ``hashed`` (None: no such user), else None."""
        match = DEVICE_COOKIE_VALUE.fullmatch(cookie or "")
        if match is None or hashed is None:
            return None
        nonce, mac = match.groups()
        if not hmac.compare_digest(mac, self._device_mac(nonce, username, hashed)):
            return None
        return nonce

    def _device_mac(self, nonce: str, username: str, hashed: str) -> str:
        # the nonce has a fixed length and no username holds a NUL: one message per triple
        message = f"{nonce}{username}\0{hashed}".encode("utf-8", "surrogatepass")
        mac = hmac.new(self._device_key, message, hashlib.sha256).digest()[:16]
        return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()

    def _failed(self, error: BackendUnavailable | None) -> NoReturn:
        """Refuse for a second without trying again, log at most once a minute, and raise."""
        unreported = self.failures.failed(tried=error is not None)
        if unreported is not None:
            logger.warning(
                "logins refused (503), the login failure limit's storage failed: %s%s",
                error or "still failing",
                f" ({unreported} more since the last message)" if unreported else "",
            )
        raise error or BackendUnavailable("failed less than a second ago")

    def _recovered(self) -> None:
        unreported = self.failures.recovered()
        if unreported is None:
            return
        logger.warning(
            "logins accepted again, the login failure limit's storage answers"
            " (%d more refused since the last message)",
            unreported,
        )


def counters_secret(settings: Settings, ring: KeyRing) -> bytes:
    """Return the secret the counters' keys are derived from: one every host shares."""
    if settings.signing_algorithm == HS256:
        return settings.signing_secret.encode()
    private_key = ring.current.signing_key  # SIGNING_KEY_FILE's, the same on every host
    der: bytes = private_key.private_bytes(Encoding.DER, PrivateFormat.PKCS8, NoEncryption())
    return der


def init_login_failure_limit(app: Flask, settings: Settings) -> None:
    """Attach the limit to ``app``: None without USERS_FILE or with LOGIN_FAILURE_LIMIT=off.

    Its counters are the app's backend's, as the rate limits' are: one connection, not two.
    """
    app.extensions[LOGIN_FAILURE_LIMIT] = _failure_limit(app, settings, settings.users_file)


def init_client_failure_limit(app: Flask, settings: Settings) -> None:
    """Attach the limit of failed client secrets per client id to ``app``: None without
    CLIENTS_FILE or with LOGIN_FAILURE_LIMIT=off.

    It counts on the counters of ``client:<id>``, a username no login can take, so a
    client and a user never share a count.
    """
    app.extensions[CLIENT_FAILURE_LIMIT] = _failure_limit(app, settings, settings.clients_file)


def _failure_limit(app: Flask, settings: Settings, file: str | None) -> LoginFailureLimit | None:
    """Return a limit on the app's counters, or None without ``file`` or with the limit off."""
    if file is None or not settings.login_failure_limit:
        return None
    return LoginFailureLimit(
        settings.login_failure_limit,
        backend_of(app).counters,
        counters_secret(settings, app.extensions[KEY_RING]),
        clock_of(app),
    )
