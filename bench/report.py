"""The one report writer: every group's pairs in one table each, with the run's conditions."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.paired import Summary
from bench.scenarios import REQUESTS

ROOT = Path(__file__).resolve().parent.parent
TITLES = {
    "main": "The service against the floor and two peers",
    "matrix": "Store matrix: the service against a floor making one store call",
    "gateway": "The protected path through nginx and Caddy: with the gateway's check, against"
    " without",
    "rules": "The gateway's check against the floor's GET: no rules, 100 rules, Envoy's route",
    "scale": "POST /token and GET /sessions on a full store against an empty one",
}


def _number(value: float | None, digits: int = 0, suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:.{digits}f}{suffix}"


def verdict_text(summary: Summary) -> str:
    if not summary.ok:
        return "**wrong statuses**"
    met = summary.verdict
    return "-" if met is None else "met" if met else "**missed**"


def target_text(summary: Summary) -> str:
    case = summary.case
    if case.target is None:
        return "-"
    return f"{'<' if case.below else '<='} {case.target:.2f}x"


def table(summaries: list[Summary], short: bool) -> str:
    """Return the Markdown table of a group's pairs (no verdict in the short mode)."""
    lines = [
        "| request | service side | other side (its request) | service µs/req | other µs/req "
        "| service / other, median | lowest - highest | rounds | target | verdict "
        "| req/s (service, other) | p99 ms (service, other) | statuses (service / other) |",
        "|---|---|---|---:|---:|---:|---|---:|---|---|---|---|---|",
    ]
    for summary in summaries:
        case = summary.case
        spread = (
            "n/a" if summary.lowest is None or summary.highest is None
            else f"{summary.lowest:.2f} - {summary.highest:.2f}"
        )  # fmt: skip
        verdict = "-" if short and summary.ok else verdict_text(summary)
        lines.append(
            f"| {case.request} {REQUESTS[case.request].title} | {case.service.name} "
            f"| {case.other.name} ({case.answered}) | {_number(summary.service_us)} "
            f"| {_number(summary.other_us)} | {_number(summary.ratio, 2, 'x')} | {spread} "
            f"| {summary.rounds} | {target_text(summary)} | {verdict} "
            f"| {summary.service_rps:.0f}, {summary.other_rps:.0f} "
            f"| {summary.service_p99_ms:.1f}, {summary.other_p99_ms:.1f} | {summary.statuses} |"
        )
    return "\n".join(lines)


def memory_table(memory: dict[str, Any], limit: float) -> list[str]:
    """Return the section of the workers' RSS over many logins."""
    lines = [
        "",
        f"### Workers' RSS over {memory['logins']:,} logins (after {memory['warmup']:,})",
        "",
        f"Logins answered: {memory['statuses']}; workers replaced: {memory['replaced'] or 'none'}; "
        f"limit ±{limit:.0%}: **{'met' if memory['met'] else 'missed'}**",
        "",
        "| worker PID | VmRSS before (KiB) | VmRSS after (KiB) | change |",
        "|---|---:|---:|---:|",
    ]
    for pid, (before, after) in memory["rss"].items():
        change = "gone" if not before or after is None else f"{after / before - 1:+.1%}"
        lines.append(f"| {pid} | {before} | {after} | {change} |")
    return lines


def document(
    args: Any, sections: dict[str, list[Summary]], notes: dict[str, list[str]], warnings: dict
) -> str:
    """Return the whole report: how it was run, on what, then each group's table."""
    mode = "short" if args.short else "full"
    lines = [
        f"# Benchmark ({mode} mode: {', '.join(sections)})",
        "",
        f"- date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}",
        f"- code: {code_version()}",
        *machine_description(),
        "- every app under `gunicorn -c gunicorn.conf.py` (the service's own settings: "
        "workers, gthread threads, keep-alive, logging); the floor and the peers write one "
        "request line each, as the service's request log does",
        f"- paired: both sides at once, every process of theirs on one CPU, their two wrk "
        f"({max(1, args.connections // 2)} connections, {args.threads} thread each) and the "
        f"stores on the others; {args.rounds} round(s) x {args.seconds} s after {args.warmup} s "
        "of warm-up; CPU µs/req = utime+stime of a side's processes over the requests its "
        "wrk completed; the ratio is the median of the rounds' ratios (bench/paired.py)",
    ]
    for group, summaries in sections.items():
        lines += ["", f"## {TITLES[group]}", "", *notes.get(group, [])]
        if summaries:
            lines += ["", table(summaries, args.short)]
        lines += notes.get(f"{group}-after", [])
    if any(warnings.values()):
        lines += ["", "## Warnings and errors in the servers' output (last 10 each)", ""]
        for name, found in warnings.items():
            if found:
                lines += [f"{name}:", "", "```", *found, "```", ""]
    return "\n".join(lines) + "\n"


def code_version(root: Path = ROOT) -> str:
    """Return the commit measured, and which tracked files differed from it, if any."""

    def git(*arguments: str) -> str:
        completed = subprocess.run(
            ["git", *arguments], cwd=root, capture_output=True, text=True, timeout=10, check=False
        )
        return completed.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown commit"
    changed = git("diff", "HEAD", "--name-only").splitlines()
    return f"{commit} with uncommitted changes to {', '.join(changed)}" if changed else commit


def machine_description() -> list[str]:
    """Return what the numbers depend on: CPU, cores, memory, kernel, load, versions."""
    model, memory = "unknown CPU", "unknown"
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        model = next(
            (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines()
             if line.startswith("model name")), model,
        )  # fmt: skip
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f"{kib / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
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
        f"- machine: {model}, {os.cpu_count()} cores, {memory} memory, "
        f"{platform.system()} {platform.release()}; load average at the end: {load}",
        f"- Python {platform.python_version()}, {', '.join(versions)}, {wrk_version}",
    ]
