"""A worker's metric files, allocated on disk before prometheus_client maps them.

prometheus_client keeps each process's counts in files it maps into memory, created
sparse: their blocks are allocated only when a count is first written. On a full disk
that write cannot be refused as an error: the kernel kills the process with SIGBUS. So
each worker creates its files itself, allocated in full, and prometheus_client, which
takes an existing file's size for its capacity, never writes to a block the disk has
yet to give.
"""

from __future__ import annotations

import os

#: The variable through which gunicorn.conf.py hands the folder to prometheus_client.
FOLDER_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
#: The kinds of metric the service has, one file each per process (no gauge).
KINDS = ("counter", "histogram")
#: Bytes allocated for each file. prometheus_client grows a file (sparse again) only when
#: its entries outgrow it: the latency histograms of every route fill about 56 KiB; the
#: request counter, were every route answered with 16 statuses to each of 8 methods, 500.
RESERVED_BYTES = 1 << 20


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
