"""Paired runs: the service and one other app under load at the same time, on one CPU.

The CPU time a request costs on this kind of machine is not steady: a fixed loop of
Python, pinned to one core and run every 0.3 s, took between 96 and 267 ms of CPU
time, each core changing speed on its own within seconds. Runs taken one after
another therefore differ by more than the differences they are meant to show, and
two apps loaded at once but left to roam over the cores each get a different share
of fast and slow cores. Two apps loaded at once on the same one core share whatever
that core does: the ratio of their costs per request is steady to a few percent
(service against service: medians of 6 rounds 1.00 to 1.03, single rounds 0.82 to 1.10).

So each pair runs both apps' gunicorn processes on the last CPU the bench may use,
and their two wrk, each with half the connections, on the others. The targets are
judged on these ratios, one per round, as medians.
"""

from __future__ import annotations

import contextlib
import os
import statistics
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from bench import report
from bench.report import Run
from bench.servers import Server


@dataclass(frozen=True)
class Pair:
    """One round of a pair: the service's run and the other app's, taken at the same time."""

    service: Run
    other: Run

    @property
    def ratio(self) -> float | None:
        """Return the service's CPU per request over the other app's, None if unknown."""
        mine, theirs = self.service.cpu_us_per_request, self.other.cpu_us_per_request
        return None if mine is None or not theirs else mine / theirs


@dataclass(frozen=True)
class PairSummary:
    """A pair over every round: the median ratio, its range, and each app's median cost."""

    ratio: float | None
    lowest: float | None
    highest: float | None
    service_us: float | None
    other_us: float | None
    rounds: int
    ok: bool


def summarize(pairs: list[Pair], service_status: int, other_status: int) -> PairSummary:
    """Return the medians of ``pairs``, and whether every run answered its expected status."""
    ratios = [ratio for pair in pairs if (ratio := pair.ratio) is not None]

    def median_cost(runs: list[Run]) -> float | None:
        costs = [cost for run in runs if (cost := run.cpu_us_per_request) is not None]
        return statistics.median(costs) if costs else None

    return PairSummary(
        ratio=statistics.median(ratios) if ratios else None,
        lowest=min(ratios, default=None),
        highest=max(ratios, default=None),
        service_us=median_cost([pair.service for pair in pairs]),
        other_us=median_cost([pair.other for pair in pairs]),
        rounds=len(pairs),
        ok=all(
            report.summarize([pair.service], service_status).ok
            and report.summarize([pair.other], other_status).ok
            for pair in pairs
        ),
    )


def split_cpus(allowed: set[int]) -> tuple[set[int], set[int]] | None:
    """Return (the servers' CPU, wrk's CPUs), or None when there is one CPU only."""
    if len(allowed) < 2:
        return None
    last = max(allowed)
    return {last}, allowed - {last}


def pin(server: Server, cpus: set[int]) -> None:
    """Run every thread of ``server``'s master and workers on ``cpus``.

    Threads started later (gthread's pool grows on demand) inherit the affinity of
    the thread that starts them, which is pinned here too.
    """
    for pid in [server.pid, *server.worker_pids()]:
        with contextlib.suppress(FileNotFoundError):
            for task in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(ProcessLookupError):
                    os.sched_setaffinity(int(task), cpus)


@contextlib.contextmanager
def pinned(servers: list[Server]) -> Iterator[None]:
    """Pin ``servers`` to one CPU and this thread (so the wrk it starts) to the others."""
    allowed = os.sched_getaffinity(0)
    split = split_cpus(allowed)
    if split is None:
        yield
        return
    server_cpus, wrk_cpus = split
    for server in servers:
        pin(server, server_cpus)
    os.sched_setaffinity(0, wrk_cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)
        for server in servers:
            pin(server, allowed)


def run_pair(service_run: Callable[[], Run], other_run: Callable[[], Run]) -> Pair:
    """Run both at once (each starts its own wrk) and return what each saw."""
    with ThreadPoolExecutor(2) as pool:
        service = pool.submit(service_run)
        other = pool.submit(other_run)
        return Pair(service.result(), other.result())
