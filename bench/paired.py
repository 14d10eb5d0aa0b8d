"""The paired runner: the service and the app it is held against, loaded at once on one CPU.

The CPU time a request costs on this kind of machine is not steady: a fixed loop of Python,
pinned to one core and run every 0.3 s, took between 96 and 267 ms of CPU time, each core
changing speed on its own within seconds. Runs taken one after another therefore differ by
more than the differences they are meant to show, and two apps loaded at once but left to
roam over the cores each get a different share of fast and slow cores. Two apps loaded at
once on the same one core share whatever that core does: the ratio of their costs per
request is steady to a few percent (service against service: medians of 6 rounds 1.00 to
1.03, single rounds 0.82 to 1.10).

So every process of both sides (gunicorn masters and workers, nginx) runs on the last CPU
the bench may use, and the two wrk, each with half the connections, and the store servers
on the others. A side's cost is the CPU time (utime + stime, from /proc) of its processes
over the requests its wrk completed; each round gives the ratio of the two sides' costs,
and a pair is judged on the median of its rounds' ratios. The rounds go through every pair
of a group in turn, so a slow spell of the machine falls on each pair alike.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import clients, servers, wrk
from bench.scenarios import REQUESTS, Case
from bench.servers import Side, Stack

#: Seconds between the end of a wrk run and the CPU reading, for requests still in flight.
SETTLE_SECONDS = 0.1


@dataclass(frozen=True)
class Run:
    """One wrk run against one side, with the side's CPU time during it."""

    wrk: wrk.WrkResult
    cpu_seconds: float
    expected: int

    @property
    def cpu_us_per_request(self) -> float | None:
        return self.cpu_seconds * 1e6 / self.wrk.requests if self.wrk.requests else None

    @property
    def ok(self) -> bool:
        """Every request answered, with the expected status, and no socket error."""
        statuses = self.wrk.statuses
        return (
            self.wrk.requests > 0
            and set(statuses) == {self.expected}
            and statuses[self.expected] >= self.wrk.requests
            and self.wrk.socket_error_count == 0
        )


@dataclass(frozen=True)
class Pair:
    """One round of a case: the service side's run and the other side's, at the same time."""

    service: Run
    other: Run

    @property
    def ratio(self) -> float | None:
        mine, theirs = self.service.cpu_us_per_request, self.other.cpu_us_per_request
        return None if mine is None or not theirs else mine / theirs


@dataclass(frozen=True)
class Summary:
    """A case over every round: the median ratio, its range, each side's medians."""

    case: Case
    ratio: float | None
    lowest: float | None
    highest: float | None
    service_us: float | None
    other_us: float | None
    service_rps: float
    other_rps: float
    service_p99_ms: float
    other_p99_ms: float
    rounds: int
    ok: bool
    statuses: str

    @property
    def verdict(self) -> bool | None:
        """Met (True), missed (False), or no target or no ratio (None)."""
        if self.case.target is None or self.ratio is None:
            return None
        if self.case.below:
            return self.ratio < self.case.target
        return round(self.ratio, 2) <= self.case.target


def _median(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


def summarize(case: Case, pairs: list[Pair]) -> Summary:
    ratios = [ratio for pair in pairs if (ratio := pair.ratio) is not None]
    statuses = [sorted({status for p in pairs for status in getattr(p, side).wrk.statuses})
                for side in ("service", "other")]  # fmt: skip
    return Summary(
        case=case,
        ratio=statistics.median(ratios) if ratios else None,
        lowest=min(ratios, default=None),
        highest=max(ratios, default=None),
        service_us=_median([pair.service.cpu_us_per_request for pair in pairs]),
        other_us=_median([pair.other.cpu_us_per_request for pair in pairs]),
        service_rps=statistics.median(p.service.wrk.requests_per_second for p in pairs),
        other_rps=statistics.median(p.other.wrk.requests_per_second for p in pairs),
        service_p99_ms=statistics.median(p.service.wrk.p99_ms for p in pairs),
        other_p99_ms=statistics.median(p.other.wrk.p99_ms for p in pairs),
        rounds=len(pairs),
        ok=all(pair.service.ok and pair.other.ok for pair in pairs),
        statuses=" / ".join(", ".join(map(str, seen)) for seen in statuses),
    )


def split_cpus(allowed: set[int]) -> tuple[set[int], set[int]] | None:
    """Return (the apps' CPU, the CPUs of wrk and the stores), or None with one CPU only."""
    if len(allowed) < 2:
        return None
    last = max(allowed)
    return {last}, allowed - {last}


@contextlib.contextmanager
def pinned(app_pids: list[int], store_pids: list[int]) -> Iterator[None]:
    """Pin the apps to one CPU; this thread (so the wrk it starts) and the stores to the rest."""
    allowed = os.sched_getaffinity(0)
    split = split_cpus(allowed)
    if split is None:
        yield
        return
    app_cpus, other_cpus = split
    for pid in app_pids:
        servers.pin(pid, app_cpus)
    for pid in store_pids:
        servers.pin(pid, other_cpus)
    os.sched_setaffinity(0, other_cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)
        for pid in app_pids + store_pids:
            servers.pin(pid, allowed)


def one_run(side: Side, key: str, held: clients.Credentials, seconds: int, args: Any) -> Run:
    """Run wrk once against ``side`` with half the connections; return what it saw."""
    request = REQUESTS[key]
    before = side.cpu_seconds()
    result = wrk.run(
        side.url + request.path, clients.wrk_script(request, held),
        Path(args.folder) / f"wrk-{side.pids[0]}.lua", seconds=seconds,
        connections=max(1, args.connections // 2), threads=args.threads,
    )  # fmt: skip
    time.sleep(SETTLE_SECONDS)
    return Run(result, side.cpu_seconds() - before, request.status)


def run_pair(stack: Stack, case: Case, seconds: int, args: Any) -> Pair:
    """Run both sides of ``case`` at once (each its own wrk); return what each saw."""
    service, other = stack.side(case.service), stack.side(case.other)
    held = stack.held(case.service, case.service), stack.held(case.other, case.service)
    with ThreadPoolExecutor(2) as pool:
        mine = pool.submit(one_run, service, case.request, held[0], seconds, args)
        theirs = pool.submit(one_run, other, case.answered, held[1], seconds, args)
        return Pair(mine.result(), theirs.result())


def run_group(stack: Stack, case_list: list[Case], args: Any) -> dict[Case, list[Pair]]:
    """Start every side, check each answer once, warm up, then run the rounds, pinned."""
    for case in case_list:
        for app, key in ((case.service, case.request), (case.other, case.answered)):
            clients.check(stack.side(app).url, REQUESTS[key], stack.held(app, case.service))
    app_pids = sorted({pid for side in stack.sides.values() for pid in side.pids})
    pairs: dict[Case, list[Pair]] = {case: [] for case in case_list}
    with pinned(app_pids, stack.store_pids()):
        if args.warmup:
            for case in case_list:
                run_pair(stack, case, args.warmup, args)
        for number in range(args.rounds):
            for case in case_list:
                pair = run_pair(stack, case, args.seconds, args)
                pairs[case].append(pair)
                print(
                    f"{case.group} round {number + 1}: {case.request} {case.service.name} / "
                    f"{case.other.name} = {pair.ratio or 0:.2f}x ({_us(pair.service)} / "
                    f"{_us(pair.other)} µs) statuses {pair.service.wrk.statuses} "
                    f"{pair.other.wrk.statuses}",
                    file=sys.stderr,
                    flush=True,
                )
    return pairs


def _us(run: Run) -> str:
    cost = run.cpu_us_per_request
    return "n/a" if cost is None else f"{cost:.0f}"
