"""CPU time and memory of a process tree, read from /proc (Linux)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

PROC = Path("/proc")
TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid: int, proc: Path = PROC) -> int:
    """Return utime + stime + cutime + cstime of ``pid`` (its reaped children included)."""
    stat = (proc / str(pid) / "stat").read_text()
    # the command name, field 2, is in parentheses and may hold spaces or ')'
    after_name = stat[stat.rindex(")") + 2 :].split()
    # fields 14..17 (utime, stime, cutime, cstime); field 3 (state) is after_name[0]
    return sum(int(value) for value in after_name[11:15])


def children(pid: int, proc: Path = PROC) -> list[int]:
    """Return the PIDs of the live children of ``pid``."""
    listed = proc / str(pid) / "task" / str(pid) / "children"
    if listed.exists():
        return [int(child) for child in listed.read_text().split()]
    found = []  # kernels without CONFIG_PROC_CHILDREN: scan every process's parent
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                found.append(int(entry.name))
    return sorted(found)


def tree_cpu_seconds(pid: int, proc: Path = PROC) -> float:
    """Return the CPU seconds spent so far by ``pid`` and its children, living or reaped.

    A child that exits is counted in its parent's cutime/cstime once reaped, so a
    worker that a gunicorn master replaced is not lost between two readings.
    """
    ticks = cpu_ticks(pid, proc)
    for child in children(pid, proc):
        # a child that exited between the two reads is in the parent's time once reaped
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            ticks += cpu_ticks(child, proc)
    return ticks / TICKS_PER_SECOND


def rss_kib(pid: int, proc: Path = PROC) -> int:
    """Return the resident set size of ``pid`` in KiB (VmRSS)."""
    for line in (proc / str(pid) / "status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise ValueError(f"no VmRSS for process {pid}")
