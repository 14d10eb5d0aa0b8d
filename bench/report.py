"""Medians over rounds, ratios to the floor, the targets, and the Markdown that shows them."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bench.scenarios import Scenario
from bench.wrk import WrkResult

if TYPE_CHECKING:
    from bench.paired import PairSummary

SERVICE, FLOOR = "service", "floor"
#: Highest CPU per request of the service, as a multiple of the floor's, by scenario.
FLOOR_TARGETS = {"a": 1.00, "d": 1.00, "f": 1.00, "e": 1.10, "b": 1.25, "c": 1.25, "g": 0.95}


@dataclass(frozen=True)
class Run:
    """One wrk run against one app, with the server's CPU time during it."""

    wrk: WrkResult
    cpu_seconds: float

    @property
    def cpu_us_per_request(self) -> float | None:
        if self.wrk.requests == 0:
            return None
        return self.cpu_seconds * 1e6 / self.wrk.requests


@dataclass(frozen=True)
class Summary:
    """An app's scenario over every round: medians, and every status seen."""

    cpu_us: float | None
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    requests: int
    non_2xx: int
    statuses: dict[int, int]
    socket_errors: int
    expected_status: int

    @property
    def unexpected(self) -> int:
        """Responses of another status than expected, and requests wrk saw no status for."""
        counted = sum(self.statuses.values())
        wrong = sum(
            count for status, count in self.statuses.items() if status != self.expected_status
        )
        return wrong + max(self.requests - counted, 0)

    @property
    def ok(self) -> bool:
        return self.requests > 0 and self.unexpected == 0 and self.socket_errors == 0


def summarize(runs: list[Run], expected_status: int) -> Summary:
    """Return the medians of ``runs`` and the sums of what went wrong in them."""
    statuses: dict[int, int] = {}
    for run in runs:
        for status, count in run.wrk.statuses.items():
            statuses[status] = statuses.get(status, 0) + count
    costs = [cost for run in runs if (cost := run.cpu_us_per_request) is not None]
    return Summary(
        cpu_us=statistics.median(costs) if costs else None,
        requests_per_second=statistics.median(run.wrk.requests_per_second for run in runs),
        p50_ms=statistics.median(run.wrk.p50_ms for run in runs),
        p99_ms=statistics.median(run.wrk.p99_ms for run in runs),
        requests=sum(run.wrk.requests for run in runs),
        non_2xx=sum(run.wrk.non_2xx for run in runs),
        statuses=statuses,
        socket_errors=sum(run.wrk.socket_error_count for run in runs),
        expected_status=expected_status,
    )


def ratio(cost: float | None, floor_cost: float | None) -> float | None:
    """Return ``cost / floor_cost``, or None when either is unknown."""
    if cost is None or not floor_cost:
        return None
    return cost / floor_cost


@dataclass(frozen=True)
class Target:
    what: str
    value: str
    limit: str
    met: bool | None  # None: not measured


def targets(
    scenario_list: list[Scenario],
    pair_summaries: dict[tuple[str, str], PairSummary],
    peers: list[str],
) -> list[Target]:
    """Return the verdicts, from the paired runs: the service's CPU per request over the
    floor's (median ratio), and over each peer's (below 1 against every peer)."""
    found: list[Target] = []
    keys = [scenario.key for scenario in scenario_list if scenario.peers]
    by_key = {scenario.key: scenario for scenario in scenario_list}
    for key, limit in FLOOR_TARGETS.items():
        if key not in by_key:
            continue
        pair = pair_summaries.get((FLOOR, key))
        value = None if pair is None else pair.ratio
        found.append(
            Target(
                f"{key}: service CPU/request vs floor {by_key[key].floor_key}",
                "n/a" if value is None else f"{value:.2f}x",
                f"<= {limit:.2f}x",
                None if value is None else round(value, 2) <= limit,
            )
        )
    for key in keys:
        what = f"{key}: service CPU/request below both peers"
        ratios = [getattr(pair_summaries.get((peer, key)), "ratio", None) for peer in peers]
        if not peers or any(value is None for value in ratios):
            found.append(Target(what, "n/a", "< 1.00x of each peer", None))
            continue
        shown = ", ".join(f"{value:.2f}x" for value in ratios)  # type: ignore[str-format]
        met = all(value < 1 for value in ratios)  # type: ignore[operator]
        found.append(Target(what, shown, "< 1.00x of each peer", met))
    return found


def _number(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _statuses(summary: Summary) -> str:
    return ", ".join(f"{status} ({count})" for status, count in sorted(summary.statuses.items()))


def results_table(
    scenario_list: list[Scenario], apps: list[str], summaries: dict[tuple[str, str], Summary]
) -> str:
    """Return the Markdown table of every app's every scenario."""
    lines = [
        "| scenario | app | CPU µs/req | vs floor | req/s | p50 ms | p99 ms | non-2xx "
        "| statuses | socket errors | as expected |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for scenario in scenario_list:
        floor = summaries.get((FLOOR, scenario.floor_key))
        for app in apps:
            summary = summaries.get((app, scenario.key))
            if summary is None:
                continue
            versus = ratio(summary.cpu_us, floor and floor.cpu_us)
            lines.append(
                f"| {scenario.key} {scenario.title} | {app} | {_number(summary.cpu_us)} "
                f"| {_number(versus, 2)}{'x' if versus is not None else ''} "
                f"| {summary.requests_per_second:.0f} "
                f"| {summary.p50_ms:.2f} | {summary.p99_ms:.2f} "
                f"| {summary.non_2xx} | {_statuses(summary)} | {summary.socket_errors} "
                f"| {'yes' if summary.ok else '**no**'} |"
            )
    return "\n".join(lines)


def pairs_table(
    scenario_list: list[Scenario],
    apps: list[str],
    pair_summaries: dict[tuple[str, str], PairSummary],
) -> str:
    """Return the Markdown table of the paired runs."""
    lines = [
        "| scenario | paired with | service CPU µs/req | its CPU µs/req | service / it, median "
        "| lowest - highest | rounds | as expected |",
        "|---|---|---:|---:|---:|---|---:|---|",
    ]
    for scenario in scenario_list:
        for app in apps:
            pair = pair_summaries.get((app, scenario.key))
            if pair is None:
                continue
            spread = (
                "n/a"
                if pair.lowest is None or pair.highest is None
                else f"{pair.lowest:.2f} - {pair.highest:.2f}"
            )
            answered = f"{scenario.floor_key}" if app == FLOOR else scenario.key
            lines.append(
                f"| {scenario.key} {scenario.title} | {app} ({answered}) "
                f"| {_number(pair.service_us)} | {_number(pair.other_us)} "
                f"| {_number(pair.ratio, 2)}{'x' if pair.ratio is not None else ''} "
                f"| {spread} | {pair.rounds} | {'yes' if pair.ok else '**no**'} |"
            )
    return "\n".join(lines)


def targets_table(found: list[Target]) -> str:
    """Return the Markdown table of the targets with met / missed."""
    lines = ["| target | measured | limit | verdict |", "|---|---|---|---|"]
    for target in found:
        verdict = "n/a" if target.met is None else "met" if target.met else "**missed**"
        lines.append(f"| {target.what} | {target.value} | {target.limit} | {verdict} |")
    return "\n".join(lines)


def log_warnings_section(warnings: dict[str, list[str]]) -> list[str]:
    """Return a Markdown section quoting the servers' last warnings and errors, if any."""
    if not any(warnings.values()):
        return []
    lines = ["", "## Warnings and errors in the servers' logs (last 10 each)", ""]
    for name, found in warnings.items():
        if found:
            lines += [f"{name}:", "", "```", *found, "```", ""]
    return lines


def machine_description() -> list[str]:
    """Return what the numbers depend on: CPU, cores, memory, kernel, load, versions."""
    import os
    import platform
    import subprocess
    from importlib import metadata

    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo", encoding="utf-8") as meminfo:
            memory = meminfo.readline().split()[1]
        memory_text = f"{int(memory) / 1024 / 1024:.0f} GiB"
    except OSError:
        memory_text = "unknown"
    versions = []
    for package in ("gunicorn", "Flask", "Werkzeug", "PyJWT", "Flask-JWT-Extended"):
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} (not installed)")
    wrk_version = subprocess.run(
        ["wrk", "-v"], capture_output=True, text=True, timeout=10, check=False
    ).stdout.split(" [")[0]
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    return [
        f"- machine: {model}, {os.cpu_count()} cores, {memory_text} memory, "
        f"{platform.system()} {platform.release()}",
        f"- load average at the end (1, 5, 15 min): {load}",
        f"- Python {platform.python_version()}, {', '.join(versions)}, {wrk_version}",
    ]
