"""Each worker's memory and open files, read from /proc once a second, per worker slot.

A worker killed with ``kill -9`` comes back under a new PID; its replacement takes the
slot that the dead one left (the lowest free one), so a slot is a line on the chart, and
each PID is judged on its own (checks.py).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tests.system.soak.stack import Gunicorn

PROC = Path("/proc")


@dataclass(frozen=True)
class Sample:
    at: float  # seconds since the run started
    service: str
    slot: int
    pid: int
    rss_kib: int
    fds: int  # every open file descriptor
    other_fds: int  # those that are not sockets: files, pipes, event polls


def open_files(pid: int) -> tuple[int, int]:
    """Return the count of ``pid``'s open descriptors, and of those that are not sockets."""
    folder = PROC / str(pid) / "fd"
    total = other = 0
    for entry in os.listdir(folder):
        total += 1
        try:
            if not os.readlink(folder / entry).startswith("socket:"):
                other += 1
        except OSError:  # closed meanwhile
            total -= 1
    return total, other


def started_ticks(pid: int) -> int:
    """Return when ``pid`` started, in clock ticks since boot (/proc/PID/stat, field 22)."""
    stat = (PROC / str(pid) / "stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[19])


class Sampler(threading.Thread):
    """Reads every worker of ``services`` each ``interval`` seconds until stopped."""

    def __init__(self, services: list[Gunicorn], origin: float, interval: float = 1.0):
        super().__init__(name="sampler", daemon=True)
        self.services, self.origin, self.interval = services, origin, interval
        self.samples: list[Sample] = []
        self.slots: dict[str, dict[int, int]] = {service.name: {} for service in services}
        self.first_seen: dict[int, float] = {}
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stopping.wait(self.interval):
                self.sample()
        except BaseException as error:
            self.error = error

    def sample(self) -> None:
        now = time.monotonic() - self.origin
        for service in self.services:
            slots = self.slots[service.name]
            live = set(service.worker_pids())
            for slot in [slot for slot, pid in slots.items() if pid not in live]:
                del slots[slot]
            for pid in sorted(live - set(slots.values())):
                free = next(number for number in range(len(slots) + 1) if number not in slots)
                slots[free] = pid
                self.first_seen.setdefault(pid, now)
            for slot, pid in sorted(slots.items()):
                try:
                    rss = rss_kib(pid)
                    fds, other = open_files(pid)
                except (OSError, ValueError):  # gone between the listing and the reading
                    continue
                self.samples.append(Sample(now, service.name, slot, pid, rss, fds, other))

    def youngest(self, service: Gunicorn) -> int | None:
        """Return the PID of ``service``'s most recently started worker."""
        pids = service.worker_pids()
        if not pids:
            return None
        ages = {}
        for pid in pids:
            try:
                ages[pid] = started_ticks(pid)
            except (OSError, ValueError):
                continue
        return max(ages, key=lambda pid: (ages[pid], pid)) if ages else None


def rss_kib(pid: int) -> int:
    """Return the resident set size of ``pid`` in KiB (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise ValueError(f"no VmRSS for process {pid}")
