"""An exited worker's metric files, merged by the master in process: every total kept,
only the live workers' files left, and the folder the master owns marked as its own."""

from __future__ import annotations

import errno
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.utils import floatToGoString

from app.observability import metrics_scrape
from app.observability.metric_files import KINDS, scrape_lock
from app.observability.metrics_scrape import (
    OWNER_FILE,
    fresh_multiprocess_folder,
    merge_exited_workers,
    own_multiprocess_folder,
)
from tests.helpers.tools import ROOT

#: A worker's counts: {label value: (count, [observations])}.
worker_counts = st.dictionaries(
    st.text(max_size=8),
    st.tuples(st.integers(0, 10**6), st.lists(st.integers(0, 3), max_size=4)),
    max_size=4,
)


BOUNDS = (1.0, 2.0, math.inf)


def write_worker_files(folder: Path, pid: int | str, counts: dict) -> None:
    """Write a worker's counter and histogram files as prometheus_client's value class
    does: one entry a sample, each bucket holding its own count (not cumulated)."""
    counter = MmapedDict(str(folder / f"counter_{pid}.db"))
    histogram = MmapedDict(str(folder / f"histogram_{pid}.db"))
    for label, (count, observations) in counts.items():
        counter.write_value(mmap_key("c", "c_total", ["l"], [label], "c help"), count, 0.0)
        lower = -math.inf
        for bound in BOUNDS:
            in_bucket = sum(1 for seen in observations if lower < seen <= bound)
            key = mmap_key("h", "h_bucket", ["l", "le"], [label, floatToGoString(bound)], "h help")
            lower = bound
            histogram.write_value(key, in_bucket, 0.0)
        key = mmap_key("h", "h_sum", ["l"], [label], "h help")
        histogram.write_value(key, sum(observations), 0.0)
    counter.close()
    histogram.close()


def collected(folder: Path) -> dict[tuple, float]:
    """Return what a scrape of ``folder`` shows: {(sample, labels): value}."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for metric in MultiProcessCollector(None, str(folder)).collect()
        for sample in metric.samples
    }


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    rounds=st.lists(
        st.dictionaries(st.integers(1, 40), st.tuples(worker_counts, st.booleans()), max_size=4),
        min_size=1,
        max_size=3,
    )
)
def test_merging_exited_workers_keeps_every_total_and_only_the_live_files(rounds):
    """Each round: workers (pid: counts, exited or not) write their files, then the master
    merges the exited ones; the scrape shows the same totals before and after."""
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        live: set[int] = set()
        for workers in rounds:
            for pid, (counts, _) in workers.items():
                if pid not in live:  # a live worker keeps its file (a new one, a new pid)
                    write_worker_files(folder, pid, counts)
            live = (live | set(workers)) - {pid for pid, (_, exited) in workers.items() if exited}
            before = collected(folder)
            merge_exited_workers(str(folder), live)
            assert collected(folder) == before
            expected = {f"{kind}_{pid}.db" for pid in live for kind in KINDS}
            kept = {path.name for path in folder.iterdir()} - {
                "counter_merged.db",
                "histogram_merged.db",
            }
            assert kept == expected


def test_a_merge_leaves_the_files_while_a_scrape_reads_them(tmp_path, monkeypatch, caplog):
    write_worker_files(tmp_path, 7, {"a": (3, [1])})
    before = collected(tmp_path)
    monkeypatch.setattr(metrics_scrape, "MERGE_WAIT_SECONDS", 0.2)
    with scrape_lock(str(tmp_path)):
        merge_exited_workers(str(tmp_path), live=())
        assert sorted(path.name for path in tmp_path.iterdir()) == [
            "counter_7.db",
            "histogram_7.db",
        ]
    assert "a scrape held" in caplog.text
    merge_exited_workers(str(tmp_path), live=())  # the next exit's merge takes them
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "counter_merged.db",
        "histogram_merged.db",
    ]
    assert collected(tmp_path) == before


@pytest.mark.processes
def test_a_scrape_waits_for_a_merge_under_way(tmp_path):
    """A worker's scrape takes the folder's shared lock: while the master merges, it waits."""
    script = (
        "import threading\n"
        "from app.observability.metric_files import merge_lock\n"
        "from app.observability.metrics import Metrics\n"
        "metrics = Metrics()\n"
        "assert metrics.multiprocess\n"
        "done = threading.Event()\n"
        "with merge_lock(FOLDER, 5) as locked:\n"
        "    assert locked\n"
        "    threading.Thread(target=lambda: (metrics.exposition(), done.set())).start()\n"
        "    assert not done.wait(1), 'scraped during a merge'\n"
        "assert done.wait(20), 'the scrape never ended'\n"
    ).replace("FOLDER", repr(str(tmp_path)))
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_a_merge_that_fails_leaves_every_file_and_count(tmp_path, monkeypatch, caplog):
    write_worker_files(tmp_path, 7, {"a": (3, [1])})
    merge_exited_workers(str(tmp_path), live=())
    write_worker_files(tmp_path, 8, {"a": (2, [2])})
    before = collected(tmp_path)
    names = sorted(path.name for path in tmp_path.iterdir())

    def full_disk(descriptor: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full_disk)
    merge_exited_workers(str(tmp_path), live=())
    assert "not merged" in caplog.text
    assert "No space left on device" in caplog.text
    assert sorted(path.name for path in tmp_path.iterdir()) == names  # no partial file left
    assert collected(tmp_path) == before


def test_an_exited_workers_empty_file_is_removed(tmp_path):
    (tmp_path / "counter_9.db").touch()  # the worker died before it allocated its file
    merge_exited_workers(str(tmp_path), live=())
    assert [path.name for path in tmp_path.iterdir()] == ["counter_merged.db"]
    assert collected(tmp_path) == {}


@pytest.mark.parametrize(
    ("owner", "ours"), [(None, False), ("1", False), ("own pid", True), (b"\xff", False)]
)
def test_the_master_owns_only_a_folder_with_its_mark(tmp_path, monkeypatch, owner, ours):
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    if isinstance(owner, bytes):
        (tmp_path / OWNER_FILE).write_bytes(owner)
    elif owner is not None:
        (tmp_path / OWNER_FILE).write_text(str(os.getpid()) if owner == "own pid" else owner)
    assert own_multiprocess_folder() == (str(tmp_path) if ours else None)


def test_a_fresh_folder_is_marked_as_the_masters_own(tmp_path, monkeypatch):
    folder = fresh_multiprocess_folder(str(tmp_path))
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", folder)
    assert own_multiprocess_folder() == folder
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))  # its parent: not marked
    assert own_multiprocess_folder() is None
