"""Copy every refresh token, deny entry and cut-off from one store to another (``flask
tokens copy``).

Each backend keeps the same facts about a token (its digest, username, issue time,
expiry, family, generation, retirement, parent, lineage, session, and its place in its
user's order of issue), and each user's cut-off, in its own layout; the source exports
them as plain records (``RefreshTokenStore.export``) and the target imports them
(``import_records``), so a token refreshes, rotates, is recognised as reused, and is
evicted by the per-user limit exactly as before. Expired tokens and entries are left
behind.

The target must be empty, and must not be the source however its URL is spelled: a
second copy into a target that holds the first one's tokens would keep there what the
source has revoked, retired or revoked with its family since, so it is refused (as is
copying a store onto itself). An interrupted copy is run again into the emptied target.

The copy is of one moment of the source: the service should not be writing to it
meanwhile (docs/stores.md, "Moving tokens").
"""

from __future__ import annotations

from app.backends.interface import Imported, RefreshTokenStore


class CopyRefusedError(Exception):
    """The target is the source itself, or holds tokens or deny entries already."""


def copy_tokens(source: RefreshTokenStore, target: RefreshTokenStore) -> Imported:
    """Copy every unexpired token and deny entry of ``source`` into the empty ``target``;
    raise CopyRefusedError if ``target`` is ``source`` or holds anything, and
    BackendUnavailable if either cannot be read or written."""
    now = source.clock()
    source.ping()  # an older SQLite file gains its columns; a database its tables
    if source.is_same_store(target):  # asked before the target is opened
        raise CopyRefusedError(
            f"the target {target.location} is the store copied from (TOKEN_STORE_URL):"
            " give --to another store"
        )
    target.ping()
    if target.holds_anything():
        raise CopyRefusedError(
            f"the target {target.location} holds refresh tokens or deny entries already,"
            " and a copy goes into an empty store only: empty it (docs/stores.md,"
            ' "Moving tokens") and copy again'
        )
    return target.import_records(record for record in source.export() if record.unexpired_at(now))
