"""Registered clients (CLIENTS_FILE): ids, SHA-256 digests of their secrets, roles, audiences.

The file is one JSON object, ``{"<id>": {"secret_sha256": "<hex>", "role": "user",
"audiences": [...]}, ...}``. ``flask clients`` writes it whole, under the lock beside it,
as ``flask users`` writes USERS_FILE. Each process reads it again when it changes (inode,
size or mtime), looked at at most once a second.

A secret is 256 random bits made here, never chosen by a person, so a digest suffices:
a slow hash (Argon2, bcrypt) makes guessing a *weak* secret expensive, and this one
cannot be guessed at any speed; a fast digest keeps a grant as cheap as a signature.
The digest is compared in constant time, and an unknown id is compared with a dummy one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import threading
from dataclasses import dataclass
from typing import Any

from app.auth.json_files import locked, read_text_file, replace_json_file
from app.auth.tokens import ROLES
from app.config.clock import SYSTEM_CLOCK, Clock
from app.config.parsers import AUDIENCE
from app.config.usernames import CLIENT_USERNAME_PREFIX

#: A client id: it travels in HTTP Basic (so no ``:``), form bodies, tokens and logs.
CLIENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~-]{0,63}")
#: Random bytes of a generated secret (256 bits), written as 43 base64url characters.
SECRET_BYTES = 32
#: A presented secret longer than this is refused before it is hashed.
MAX_SECRET_LENGTH = 256
#: A larger file is refused.
MAX_FILE_BYTES = 16 * 1024 * 1024
#: Seconds between two looks at the file's inode, size and mtime, per process.
RELOAD_INTERVAL = 1.0
#: The lowercase hex of a SHA-256 digest.
HEX_DIGEST = re.compile(r"[0-9a-f]{64}")

logger = logging.getLogger(__name__)


class ClientsFileError(ValueError):
    """The clients' file cannot be used; the message starts with its path."""


@dataclass(frozen=True)
class Client:
    """One registered client."""

    client_id: str
    secret_sha256: str
    role: str
    #: The ``aud`` of its tokens; (): TOKEN_AUDIENCE's.
    audiences: tuple[str, ...] = ()

    @property
    def username(self) -> str:
        """Return the username of its tokens, in the namespace no login can take."""
        return CLIENT_USERNAME_PREFIX + self.client_id

    def as_json(self) -> dict[str, Any]:
        return {
            "secret_sha256": self.secret_sha256,
            "role": self.role,
            "audiences": list(self.audiences),
        }


def new_client_secret() -> str:
    """Return a new client secret: 256 random bits, base64url (43 characters)."""
    return secrets.token_urlsafe(SECRET_BYTES)


def secret_digest(secret: str) -> str:
    """Return the SHA-256 hex digest a secret is stored as."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def client_id_problem(client_id: str) -> str | None:
    """Return why ``client_id`` cannot name a client, or None if it can."""
    if CLIENT_ID.fullmatch(client_id):
        return None
    return "a client id is 1 to 64 letters, digits, '.', '_', '~' or '-', from a letter or digit"


def parse_clients(text: str, where: str) -> dict[str, Client]:
    """Return the clients of a file's text; raise ClientsFileError saying what is wrong."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ClientsFileError(f"{where}: not JSON ({error.msg}, line {error.lineno})") from None
    if not isinstance(document, dict):
        raise ClientsFileError(f"{where}: expected one JSON object of clients")
    clients: dict[str, Client] = {}
    for client_id, entry in document.items():
        if client_id_problem(client_id):
            raise ClientsFileError(f"{where}: bad client id {client_id[:40]!r}")
        if not isinstance(entry, dict):
            raise ClientsFileError(f"{where}: the client {client_id!r} is not an object")
        digest, role = entry.get("secret_sha256"), entry.get("role")
        audiences = entry.get("audiences", [])
        if not isinstance(digest, str) or not HEX_DIGEST.fullmatch(digest):
            raise ClientsFileError(f"{where}: the client {client_id!r} has no secret_sha256")
        if role not in ROLES:
            raise ClientsFileError(f"{where}: the role of {client_id!r} is not admin or user")
        if not isinstance(audiences, list) or not all(
            isinstance(item, str) and AUDIENCE.fullmatch(item) for item in audiences
        ):
            raise ClientsFileError(f"{where}: the audiences of {client_id!r} are not names")
        clients[client_id] = Client(client_id, digest, role, tuple(audiences))
    return clients


def read_clients_file(path: str) -> dict[str, Client]:
    """Return the clients of the file at ``path``; FileNotFoundError if there is none."""
    return parse_clients(read_text_file(path, MAX_FILE_BYTES, ClientsFileError), path)


def change_clients(path: str, change: Any) -> bool:
    """Apply ``change`` (clients in, True to write) to the file's clients under the lock."""
    with locked(path):
        try:
            clients = read_clients_file(path)
        except FileNotFoundError:
            clients = {}
        changed: bool = change(clients)
        if changed:
            document = {client_id: client.as_json() for client_id, client in clients.items()}
            replace_json_file(path, document, ".clients-")
    return changed


class ClientRegistry:
    """The clients of CLIENTS_FILE, as this process last read them, and their secret check."""

    def __init__(self, path: str, clock: Clock = SYSTEM_CLOCK) -> None:
        self.path = path
        self.clock = clock
        self._clients: dict[str, Client] = {}
        self._signature: tuple[int, int, int] | None = None
        self._next_look = 0.0
        self._lock = threading.Lock()
        #: What an unknown id's secret is compared with, so that it takes the same time.
        self._dummy = secret_digest(new_client_secret())
        self._reload()

    def get(self, client_id: str) -> Client | None:
        """Return the client ``client_id``, as the file was at the last look, or None."""
        if self.clock.monotonic() >= self._next_look:
            with self._lock:
                if self.clock.monotonic() >= self._next_look:
                    self._next_look = self.clock.monotonic() + RELOAD_INTERVAL
                    self._reload()
        return self._clients.get(client_id)

    def authenticate(self, client_id: str, secret: str) -> Client | None:
        """Return the client if ``secret`` is its secret, else None (unknown id alike)."""
        client = self.get(client_id)
        if len(secret) > MAX_SECRET_LENGTH:
            return None
        stored = self._dummy if client is None else client.secret_sha256
        matches = hmac.compare_digest(secret_digest(secret), stored)
        return client if matches and client is not None else None

    def still_holds(self, client: Client) -> bool:
        """Return whether the file, read again now, still holds ``client`` as it was (its
        secret, role and audiences): ``flask clients`` changes the file, then cuts off the
        client's tokens, so a grant that waited out that cut-off checks the file again."""
        with self._lock:
            self._reload()
            return self._clients.get(client.client_id) == client

    def _reload(self) -> None:
        try:
            status = os.stat(self.path)
        except FileNotFoundError:
            self._clients, self._signature = {}, (0, 0, 0)
            return
        except OSError as error:
            logger.error("CLIENTS_FILE %s: %s; the clients read before stay", self.path, error)
            return
        signature = (status.st_ino, status.st_size, status.st_mtime_ns)
        if signature == self._signature:
            return
        try:
            self._clients = read_clients_file(self.path)
        except (ClientsFileError, FileNotFoundError) as error:
            logger.error("CLIENTS_FILE %s; the clients read before stay", error)
        self._signature = signature
