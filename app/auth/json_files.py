"""The service's own small JSON files (USERS_FILE, CLIENTS_FILE): read whole within a size
limit, replaced at once under a writers' lock, never half written."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator


def read_text_file(path: str, max_bytes: int, error: type[ValueError]) -> str:
    """Return the UTF-8 text of the file at ``path``; FileNotFoundError if there is none,
    ``error`` (with the path) if it cannot be read, is larger than ``max_bytes`` or is
    not UTF-8."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except FileNotFoundError:
        raise
    except OSError as problem:
        raise error(f"{path}: cannot be read: {problem.strerror}") from None
    if len(data) > max_bytes:
        raise error(f"{path}: larger than {max_bytes} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8") from None


def replace_json_file(path: str, document: object, prefix: str) -> None:
    """Replace the file at ``path`` with the JSON of ``document`` at once, through a temporary
    file named ``<prefix>...`` beside it: mode 0600, the same owner, on disk before it returns."""
    text = json.dumps(document, ensure_ascii=False, indent=2, sort_keys=True) + "\n"
    folder = os.path.dirname(path)
    descriptor, temporary = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=".tmp")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            with contextlib.suppress(FileNotFoundError):
                owner = os.stat(path)
                if os.geteuid() == 0:  # root editing the service's file: it stays the service's
                    os.fchown(handle.fileno(), owner.st_uid, owner.st_gid)
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    directory = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself on disk
    finally:
        os.close(directory)


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
    """Hold the writers' lock of the file at ``path`` (``<path>.lock``, mode 0600)."""
    descriptor = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock
