"""What the service relies on in prometheus_client beyond its public API.

Its value class, switched to in-memory counting in a worker whose metric files the disk
cannot give; the exited workers' files, merged into one file per kind in its own format.

tests/unit/test_compat.py checks each assumption against the installed release.
"""

from __future__ import annotations

import os

#: The distribution and the release (major.minor) whose internals were checked.
DISTRIBUTION = "prometheus-client"
CHECKED_VERSION = "0.26"


def count_in_process_memory() -> None:
    """Make the metrics created from now on count in this process's memory, not in files.

    prometheus_client chooses its value class once, at import, from
    ``PROMETHEUS_MULTIPROC_DIR``; it may be imported already (gunicorn's master imports
    it when a worker exits), so the class itself is switched.
    """
    from prometheus_client import values  # only a worker whose files failed needs it

    values.ValueClass = values.MutexValue


def write_merged_metric_file(path: str, sources: list[str]) -> None:
    """Write at ``path``, a new file, the counts of the files ``sources`` (counters, or
    histograms) added up, as prometheus_client writes one process's file.

    prometheus_client adds the files up with ``MultiProcessCollector.merge``, which with
    ``accumulate=False`` keeps each histogram bucket's own count, fit for being written
    back; writing it back (``MmapedDict``, ``mmap_key``) is not public, nor that a scrape
    reads every ``<kind>_<anything>.db`` of the folder, taking the kind from the name.
    Every block is allocated before the file is mapped: on a full disk this raises
    OSError (ENOSPC) rather than a SIGBUS, and leaves no file behind.
    """
    from prometheus_client.mmap_dict import MmapedDict, mmap_key
    from prometheus_client.multiprocess import MultiProcessCollector

    entries = [
        (
            mmap_key(
                metric.name,
                sample.name,
                list(sample.labels),
                list(sample.labels.values()),
                metric.documentation,
            ),
            sample.value,
        )
        for metric in MultiProcessCollector.merge(sources, accumulate=False)
        for sample in metric.samples
    ]
    # the used length and its padding, then each entry: the key's length, the key padded
    # to 8 bytes, the value and its timestamp
    size = 8 + sum(4 + _padded_length(key) + 16 for key, _ in entries)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.posix_fallocate(descriptor, 0, size)
    except OSError:
        os.unlink(path)
        raise
    finally:
        os.close(descriptor)
    merged = MmapedDict(path)  # an existing file's size is its capacity: nothing to grow
    try:
        for key, value in entries:
            merged.write_value(key, value, 0.0)
    finally:
        merged.close()


def _padded_length(key: str) -> int:
    length = len(key.encode("utf-8"))
    return length + (8 - (length + 4) % 8)
