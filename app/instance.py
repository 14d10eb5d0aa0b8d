"""The files the settings name: the instance folder, the generated secret and key, the paths.

``create_app`` and gunicorn's master (gunicorn.conf.py, before any worker forks) call
``prepare_instance`` once, so every problem is one ConfigError at start-up rather than
a traceback in each worker. It creates the instance folder, the secret and the key
that are generated when none is set, and checks, without creating or changing
anything, the token store's folder and the user directory's file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import secrets
import sqlite3
import stat

from app.auth.key_files import create_private_file, new_private_key_pem
from app.auth.users import UsersFileError, read_users_file
from app.config import parsers as parse
from app.config.parsers import ConfigError
from app.config.settings import (
    HS256,
    KEY_FILE_NAMES,
    SECRET_FILE_NAME,
    SQLITE_FILE_NAME,
    Settings,
    SigningAlgorithm,
)
from app.config.store_url import parse_store_url, relative_path_hint, sqlite_url
from app.gateway.rules import RulesFileError, last_read_well, read_rules_file


def prepare_instance(settings: Settings) -> Settings:
    """Create and check the files ``settings`` need; return them with the generated ones."""
    instance_path = instance_folder(settings.instance_path)
    store_url = settings.token_store_url or sqlite_url(
        os.path.join(instance_path, SQLITE_FILE_NAME)
    )
    location = parse_store_url(store_url)  # its form was checked with the settings
    if location.backend == "sqlite":
        check_sqlite_path(location.path)
    secret = settings.signing_secret or load_or_create_secret(instance_path)
    key_file = settings.signing_key_file
    if settings.signing_algorithm != HS256 and key_file is None:
        key_file = load_or_create_key_file(instance_path, settings.signing_algorithm)
    if settings.users_file is not None:
        check_users_file(settings.users_file)
    if settings.access_rules_file is not None:
        check_access_rules_file(settings.access_rules_file)
    return dataclasses.replace(
        settings,
        token_store_url=store_url,
        signing_secret=secret,
        signing_key_file=key_file,
    )


def instance_folder(path: str) -> str:
    """Return the instance folder, created (mode 0700) if it is missing; refuse a non-folder."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"INSTANCE_PATH {path} exists and is not a folder") from None
    except OSError as error:
        raise ConfigError(f"INSTANCE_PATH {path} cannot be created: {error.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"INSTANCE_PATH {path} is not writable by this user")
    check_private(f"INSTANCE_PATH {path}", os.stat(path), "700")
    return path


def check_private(name: str, status: os.stat_result, mode: str) -> None:
    """Refuse what another user could have written: a file or folder of another owner, or
    one that the group or others may write (a secret of their choosing would be trusted)."""
    if status.st_uid != os.geteuid():
        raise ConfigError(
            f"{name} is owned by another user (uid {status.st_uid}), not by this one"
            f" (uid {os.geteuid()}): chown it to the service's user"
        )
    if status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(
            f"{name} is writable by other users (mode {stat.S_IMODE(status.st_mode):04o}):"
            f" chmod {mode} it"
        )


def check_sqlite_path(path: str) -> None:
    """Refuse a SQLite location the workers could not open: no folder is created for it."""
    folder = os.path.dirname(os.path.abspath(path))
    hint = relative_path_hint(path)
    if not os.path.isdir(folder):
        problem = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise ConfigError(f"TOKEN_STORE_URL: {folder} {problem}{hint}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(
            f"TOKEN_STORE_URL: the folder {folder} is not writable by this user{hint}"
        )
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return  # created by the first worker that opens it
    if not stat.S_ISREG(mode):
        raise ConfigError(f"TOKEN_STORE_URL: {path} is not a regular file")
    try:  # read-only, so that nothing is created or changed here
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as database:
            database.execute("PRAGMA schema_version").fetchone()
    except sqlite3.Error as error:
        raise ConfigError(f"TOKEN_STORE_URL: {path} is not a usable SQLite file: {error}") from None


def check_users_file(path: str) -> None:
    """Refuse a user directory the service could not read; a missing one is empty."""
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise ConfigError(f"USERS_FILE: the folder {folder} does not exist")
    try:
        read_users_file(path)
    except FileNotFoundError:
        return  # `flask users add` creates it; until then every login is refused
    except UsersFileError as error:
        raise ConfigError(f"USERS_FILE {error}") from None


def check_access_rules_file(path: str) -> None:
    """Refuse a rules file that is missing or wrong, in one line naming the rule, unless
    this process read it well before: a reload (HUP) or a worker keeps that reading, and
    the app reports the problem (``AccessRulesFile``), so a bad edit never stops the
    service."""
    try:
        read_rules_file(path)
    except RulesFileError as error:
        if last_read_well(path) is None:
            raise ConfigError(str(error)) from None


def load_or_create_secret(instance_path: str) -> str:
    """Return the secret kept in the instance folder, creating it once if it is missing.

    gunicorn's master creates it before forking (gunicorn.conf.py), so workers only
    read it. Processes that start at the same moment without a master (``flask``
    commands, several servers on one folder) race here, safely: exactly one
    candidate is written into place, whole, and every process reads that one
    (``app.auth.key_files.create_private_file``).
    """
    path = os.path.join(instance_path, SECRET_FILE_NAME)
    try:
        if not os.path.lexists(path):
            # Another process may win the race: then every process uses its secret.
            create_private_file(path, (secrets.token_urlsafe(48) + "\n").encode())
        with open(open_private(path), encoding="utf-8") as handle:
            status = os.fstat(handle.fileno())  # of the file read, not of a name swapped since
            if not stat.S_ISREG(status.st_mode):
                raise ConfigError(f"the signing secret {path} is not a regular file")
            check_private(f"the signing secret {path}", status, "600")
            secret = handle.read().strip()
    except OSError as error:
        reason = "it is a symbolic link" if error.errno == errno.ELOOP else error.strerror
        raise ConfigError(
            f"the signing secret {path} cannot be created or read: {reason}"
        ) from None
    except UnicodeDecodeError:
        raise ConfigError(
            f"the signing secret {path} cannot be created or read: UnicodeDecodeError"
        ) from None
    return parse.secret(f"the secret in {path}", secret)


def open_private(path: str) -> int:
    """Open ``path`` to read, never through a symbolic link (it could point anywhere another
    user chose), and without waiting on a FIFO."""
    return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)


def load_or_create_key_file(instance_path: str, algorithm: SigningAlgorithm) -> str:
    """Return the private key file kept in the instance folder, creating it once if missing.

    As for the secret (``load_or_create_secret``): gunicorn's master creates it
    before forking, and processes that start together agree on one key.
    """
    path = os.path.join(instance_path, KEY_FILE_NAMES[algorithm])  # EdDSA and ES256 only
    try:
        if not os.path.lexists(path):
            create_private_file(path, new_private_key_pem(algorithm))
        descriptor = open_private(path)
        try:
            status = os.fstat(descriptor)
        finally:
            os.close(descriptor)
    except OSError as error:
        reason = "it is a symbolic link" if error.errno == errno.ELOOP else error.strerror
        raise ConfigError(f"the signing key {path} cannot be created or read: {reason}") from None
    if not stat.S_ISREG(status.st_mode):
        raise ConfigError(f"the signing key {path} is not a regular file")
    check_private(f"the signing key {path}", status, "600")
    return path
