"""A worker's metric files, allocated on disk before prometheus_client maps them.

prometheus_client keeps each process's counts in files it maps into memory, created
sparse: their blocks are allocated only when a count is first written. On a full disk
that write cannot be refused as an error: the kernel kills the process with SIGBUS. So
each worker creates its files itself, allocated in full, and prometheus_client, which
takes an existing file's size for its capacity, never writes to a block the disk has
yet to give.

When a worker exits, the master adds its files into one merged file per kind and removes
them (metrics_scrape.py), so the folder holds the live workers' files and the merged
ones, however many workers came and went. A scrape reads the files under a shared lock of
the folder, the merge takes it exclusively: a scrape never sees a worker's counts both in
its own file and in the merged one, nor a file that went between listing and reading.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from collections.abc import Iterator

#: The variable through which gunicorn.conf.py hands the folder to prometheus_client.
FOLDER_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
#: The kinds of metric the service has, one file each per process (no gauge).
KINDS = ("counter", "histogram")
#: Bytes allocated for each file. prometheus_client grows a file (sparse again) only when
#: its entries outgrow it, and every entry the service's routes, statuses, methods and
#: latency buckets can make fits in this.
RESERVED_BYTES = 1 << 20
#: A worker's file: ``<kind>_<pid>.db``, as prometheus_client names a process's files.
WORKER_FILE = re.compile(r"(?P<kind>counter|histogram)_(?P<pid>[0-9]+)\.db")
#: The file of each kind holding the counts of the workers that have exited.
MERGED_FILE = "{kind}_merged.db"


def reserve_metric_files(folder: str, pid: int) -> None:
    """Create process ``pid``'s metric files in ``folder`` with every block allocated.

    Raise OSError (ENOSPC on a full disk) when the disk cannot give them, after removing
    the file it could not allocate: a scrape cannot read an empty file.
    """
    for kind in KINDS:
        path = os.path.join(folder, f"{kind}_{pid}.db")
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            # one left by a worker that had this pid before was allocated in full already
            if os.fstat(descriptor).st_size == 0:
                os.posix_fallocate(descriptor, 0, RESERVED_BYTES)
        except OSError:
            os.unlink(path)
            raise
        finally:
            os.close(descriptor)


def worker_files(folder: str) -> list[tuple[str, int, str]]:
    """Return ``(kind, pid, path)`` of every worker's metric file in ``folder``."""
    found = []
    for name in os.listdir(folder):
        match = WORKER_FILE.fullmatch(name)
        if match:
            found.append((match["kind"], int(match["pid"]), os.path.join(folder, name)))
    return found


@contextlib.contextmanager
def scrape_lock(folder: str) -> Iterator[None]:
    """Hold ``folder``'s files as they are while a scrape reads them (a shared lock)."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH)
        yield
    finally:
        os.close(descriptor)  # and the lock with it


@contextlib.contextmanager
def merge_lock(folder: str, timeout: float) -> Iterator[bool]:
    """Take ``folder`` from every scrape (an exclusive lock), waiting ``timeout`` seconds at
    most; yield whether it was taken. The master does not wait on a scrape stuck for long:
    the files stay, counted as they are, and the next merge takes them."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(0.01)
            else:
                yield True
                return
    finally:
        os.close(descriptor)
