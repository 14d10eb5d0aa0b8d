"""The optional user directory (USERS_FILE): usernames with their Argon2id password hashes.

The file is one JSON object, ``{"<username>": "<Argon2id hash>", ...}``, in UTF-8:
any username fits, and each hash carries its own salt and parameters. ``flask
users`` writes it whole into a temporary file (mode 0600), then renames it over the
old one, so a reader sees the old file or the new one, never half of one; writers
take a lock beside it (``<USERS_FILE>.lock``), so no write undoes another.

Each process reads the file again when it changes (inode, size or mtime), checked
at most once a second, with no restart, and once more after each successful login, so
that a login racing a password change or a removal keeps no refresh token. A hash made
with weaker parameters than ``HASHER``'s is replaced at its user's next successful login.

When a reading finds users removed, or given a new password, the directory tells its
``on_change`` (the app logs them out everywhere as of the file's mtime). A hash that
may be the upgrade of a weaker one (``HASHER``'s parameters where the old one's were
weaker) is not told: the service writes those itself, at a login; ``flask users``
logs out the users it changes on its own.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
from collections.abc import Callable

from argon2 import PasswordHasher, Type, extract_parameters
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from app.auth.json_files import locked, read_text_file, replace_json_file
from app.config.clock import SYSTEM_CLOCK, Clock
from app.config.usernames import username_problem

#: OWASP's Argon2id minimum (Password Storage Cheat Sheet): 19 MiB, 2 passes, 1 lane;
#: docs/users.md gives what a login costs.
HASHER = PasswordHasher(time_cost=2, memory_cost=19 * 1024, parallelism=1)
#: Seconds between two looks at the file's inode, size and mtime, per process.
RELOAD_INTERVAL = 1.0
#: A larger file is refused: a million users is about 120 MB.
MAX_FILE_BYTES = 256 * 1024 * 1024
#: Shortest password ``flask users add`` accepts (NIST SP 800-63B's minimum).
MIN_PASSWORD_LENGTH = 8

logger = logging.getLogger(__name__)


class UsersFileError(ValueError):
    """The user directory's file cannot be used; the message starts with its path."""


def parse_users(text: str, where: str) -> dict[str, str]:
    """Return the users of a file's text; raise UsersFileError saying what is wrong."""

    def pairs(items: list[tuple[str, object]]) -> dict[str, object]:
        names = [name for name, _ in items]
        twice = next((name for name in names if names.count(name) > 1), None)
        if twice is not None:
            raise UsersFileError(f"{where}: the user {twice!r} is listed twice")
        return dict(items)

    try:
        document = json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as error:
        raise UsersFileError(
            f"{where}: not JSON ({error.msg}, line {error.lineno} column {error.colno});"
            ' expected {"<username>": "<Argon2id hash>", ...}'
        ) from None
    if not isinstance(document, dict):
        raise UsersFileError(f'{where}: expected one JSON object {{"<username>": "<hash>"}}')
    for name, hashed in document.items():
        problem = username_problem(name)
        if problem:
            raise UsersFileError(f"{where}: {problem}, got {name[:40]!r}")
        if not isinstance(hashed, str) or not _is_argon2id(hashed):
            raise UsersFileError(f"{where}: the hash of {name!r} is not an Argon2id hash")
    return document


def _is_argon2id(hashed: str) -> bool:
    try:
        return extract_parameters(hashed).type is Type.ID
    except (InvalidHashError, ValueError):
        return False


def read_users_file(path: str) -> dict[str, str]:
    """Return the users of the file at ``path``; FileNotFoundError if there is none."""
    return parse_users(read_text_file(path, MAX_FILE_BYTES, UsersFileError), path)


def write_users_file(path: str, users: dict[str, str]) -> None:
    """Replace the file at ``path`` with ``users`` at once: mode 0600, the same owner."""
    replace_json_file(path, users, ".users-")


def change_users(path: str, change: Callable[[dict[str, str]], bool]) -> bool:
    """Apply ``change`` to the file's users under the lock; write them if it returns True."""
    with locked(path):
        try:
            users = read_users_file(path)
        except FileNotFoundError:
            users = {}
        changed = change(users)
        if changed:
            write_users_file(path, users)
    return changed


class UserDirectory:
    """The users of USERS_FILE, as this process last read them, and their password check.

    An unknown user's password is checked against a dummy hash made with the same
    parameters, so that a wrong password and an unknown user take the same time:
    answers cannot tell whether a username exists.
    """

    def __init__(
        self,
        path: str,
        hasher: PasswordHasher = HASHER,
        clock: Clock = SYSTEM_CLOCK,
        on_change: Callable[[list[str], int], None] | None = None,
    ) -> None:
        self.path = path
        #: Called with the users a new reading removed or gave a new password, and the
        #: second of the change (``_change_time``): before any login is checked against it.
        self.on_change = on_change
        self.hasher = hasher
        #: The app's clock: its monotonic time spaces the looks at the file.
        self.clock = clock
        self._users: dict[str, str] = {}
        #: The users of the last file read, which the next reading is compared with: kept
        #: while the file is missing (``_users`` is empty then), so that a change made
        #: meanwhile (a file moved away and another put back) still logs its users out.
        self._compared: dict[str, str] = {}
        self._signature: tuple[int, int, int] | None = None
        self._read_at = 0  # the wall-clock second of the last reading
        self._next_look = 0.0
        self._lock = threading.Lock()
        self._dummy_hash = hasher.hash(secrets.token_hex(16))
        self._reload()

    def authenticate(self, username: str, password: str) -> str | None:
        """Return ``username``'s hash if ``password`` is theirs (upgraded if it was weaker),
        else None.

        None alike for a wrong password and an unknown user: callers cannot tell them
        apart, so neither can anything they show (answers, log lines, metrics). The hash
        returned is what ``still_holds`` compares the file with after the login.
        """
        self.look()
        hashed = self._users.get(username)
        try:
            self.hasher.verify(hashed or self._dummy_hash, password)
        except VerifyMismatchError:
            return None
        except (VerificationError, InvalidHashError):  # a hash the library cannot check
            logger.error("USERS_FILE: the hash of %r cannot be checked", username)
            return None
        if hashed is None:  # the dummy's password is random: never found
            return None
        if self.hasher.check_needs_rehash(hashed):
            return self._upgrade(username, hashed, password)
        return hashed

    def still_holds(self, username: str, hashed: str) -> bool:
        """Return whether the file still gives ``username`` the hash ``hashed``, looked at now.

        Called after a login recorded its refresh token: ``flask users`` changes the file
        before it revokes the user's tokens, so a login that recorded its token after the
        revocation finds the change here, whatever the reload interval.
        """
        with self._lock:
            self._reload()
        return self._users.get(username) == hashed

    def hash_of(self, username: str) -> str | None:
        """Return ``username``'s hash as the file was at the last look, or None."""
        return self._users.get(username)

    def has(self, username: str) -> bool:
        """Return whether ``username`` is a user, as the file was at the last look."""
        self.look()
        return username in self._users

    def look(self) -> None:
        """Read the file again if it changed, at most once a ``RELOAD_INTERVAL``."""
        if self.clock.monotonic() >= self._next_look:
            self._reload_if_changed()

    def _reload_if_changed(self) -> None:
        with self._lock:
            if self.clock.monotonic() < self._next_look:
                return  # another thread looked meanwhile
            self._next_look = self.clock.monotonic() + RELOAD_INTERVAL
            self._reload()

    def _reload(self) -> None:
        """Read the file again if its inode, size or mtime changed since the last read."""
        try:
            status = os.stat(self.path)
        except FileNotFoundError:
            if self._signature not in {None, (0, 0, 0)}:  # gone since: at start, gunicorn says
                logger.warning(
                    "USERS_FILE %s does not exist: every login is refused until"
                    " `flask users add` creates it",
                    self.path,
                )
            self._users, self._signature = {}, (0, 0, 0)
            return
        except OSError as error:
            logger.error("USERS_FILE %s: %s; the users read before stay", self.path, error)
            return
        signature = (status.st_ino, status.st_size, status.st_mtime_ns)
        if signature == self._signature:
            return
        try:
            users = read_users_file(self.path)
        except (UsersFileError, FileNotFoundError) as error:
            logger.error("USERS_FILE %s; the users read before stay", error)
        else:
            changed = [
                name
                for name, hashed in self._compared.items()
                if name not in users
                or (users[name] != hashed and not self._upgrade_of(hashed, users[name]))
            ]
            if changed and self.on_change is not None:
                self.on_change(changed, self._change_time(int(status.st_mtime)))
            self._users = self._compared = users
            self._read_at = int(self.clock())
            if self._signature not in {None, (0, 0, 0)}:
                logger.info("USERS_FILE %s read again: %d users", self.path, len(users))
        self._signature = signature  # a broken file is reported once, not once a second

    def _change_time(self, mtime: int) -> int:
        """Return the second a change read now was made: the file's mtime, which every
        worker reads alike (so each logs the users out as of the same second, and a login
        with the new password, made after the change, is kept), unless the mtime cannot be
        the change's: older than the last reading (a file copied in with its old mtime
        kept) or still to come. Then the change is taken as made now, so that no token
        issued before it survives."""
        now = int(self.clock())
        return mtime if self._read_at - 1 <= mtime <= now else now

    def _upgrade_of(self, old: str, new: str) -> bool:
        """Return whether ``new`` may be the upgrade of ``old`` (same password, stronger)."""
        try:
            return self.hasher.check_needs_rehash(old) and not self.hasher.check_needs_rehash(new)
        except InvalidHashError:
            return False

    def _upgrade(self, username: str, hashed: str, password: str) -> str:
        """Replace a hash made with other parameters by one made with ``hasher``'s; return
        the hash the file holds for ``username`` as far as this login knows."""
        upgraded = self.hasher.hash(password)

        def replace(users: dict[str, str]) -> bool:
            if users.get(username) != hashed:  # changed or removed meanwhile: leave it
                return False
            users[username] = upgraded
            return True

        try:
            if not change_users(self.path, replace):
                return hashed  # the file's new hash is not this one: still_holds says so
        except (OSError, UsersFileError) as error:
            logger.warning("USERS_FILE: cannot upgrade the hash of %r: %s", username, error)
            return hashed
        logger.info("USERS_FILE: the password hash of %r upgraded", username)
        with self._lock:
            self._users = {**self._users, username: upgraded}
            self._compared = {**self._compared, username: upgraded}
        return upgraded
