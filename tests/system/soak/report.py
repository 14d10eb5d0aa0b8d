"""The soak's write-up: ``soak-<store>.md`` and a chart, ``soak-<store>.png``, in bench/results/."""

from __future__ import annotations

import datetime
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from tests.system.soak.checks import JUDGED_SPAN, excuse, judged_workers
from tests.system.soak.client import Answer

if TYPE_CHECKING:
    from tests.system.soak.run import Outcome

#: Seconds per point of the chart's series.
LATENCY_WINDOW = 5
FAULT_STYLES = {
    "kill -9": ("tab:gray", ":"),
    "HUP": ("tab:blue", "--"),
    "key added": ("tab:green", "--"),
    "key retired": ("tab:purple", "--"),
    "store outage": ("tab:red", "-"),
    "token lost": ("black", "-."),
}


def percentile(values: list[float], share: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def series(outcome: Outcome) -> dict[str, list[tuple[float, float]]]:
    """Return the chart's series, per window of ``LATENCY_WINDOW`` seconds: requests a second,
    unexpected answers a second, p50 and p99 (ms)."""
    seconds = int(outcome.schedule.seconds) + 1
    done: Counter[int] = Counter()
    errors: Counter[int] = Counter()
    latencies: dict[int, list[float]] = defaultdict(list)
    for answer in outcome.answers:
        second = int(answer.finished - outcome.origin)
        done[second] += 1
        if not answer.ok:
            errors[second] += 1
        latencies[second // LATENCY_WINDOW].append(answer.latency * 1000)
    windows = sorted(latencies)
    width = LATENCY_WINDOW

    def per_second(counts: Counter[int]) -> list[tuple[float, float]]:
        """Average each window's seconds: the bursts of the clients over the limit smoothed."""
        return [
            ((w + 0.5) * width, sum(counts[w * width + n] for n in range(width)) / width)
            for w in range(seconds // width)
        ]

    return {
        "rps": per_second(done),
        "errors": per_second(errors),
        "p50": [((w + 0.5) * LATENCY_WINDOW, percentile(latencies[w], 0.5)) for w in windows],
        "p99": [((w + 0.5) * LATENCY_WINDOW, percentile(latencies[w], 0.99)) for w in windows],
    }


def chart(outcome: Outcome, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = series(outcome)
    figure, axes = plt.subplots(4, 1, figsize=(14, 12), sharex=True)
    rps, latency, rss, files = axes
    rps.plot(*zip(*data["rps"], strict=True), color="tab:blue", linewidth=0.8, label="answers/s")
    unexpected = rps.twinx()  # on a scale of their own: a few among hundreds a second
    unexpected.plot(*zip(*data["errors"], strict=True), color="tab:red", linewidth=0.8)
    unexpected.set_ylabel("unexpected answers/s (allowed 503s too)", color="tab:red")
    unexpected.set_ylim(bottom=0)
    rps.set_ylabel(f"answers per second ({LATENCY_WINDOW} s windows)")
    if data["p50"]:
        latency.plot(*zip(*data["p50"], strict=True), label="p50", color="tab:green")
        latency.plot(*zip(*data["p99"], strict=True), label="p99", color="tab:orange")
    latency.set_yscale("log")
    latency.set_ylabel(f"latency, ms ({LATENCY_WINDOW} s windows)")
    # one line per worker process, coloured by its slot: a replacement starts a new line
    processes: dict[tuple[str, int, int], list[tuple[float, float, int]]] = defaultdict(list)
    for sample in outcome.samples:
        key = (sample.service, sample.slot, sample.pid)
        processes[key].append((sample.at, sample.rss_kib / 1024, sample.fds))
    colors = matplotlib.colormaps["tab10"]
    slots = sorted({(service, slot) for service, slot, _ in processes})
    labelled: set[tuple[str, int]] = set()
    for (service, slot, _), points in processes.items():
        times, memory, descriptors = zip(*points, strict=True)
        color = colors(slots.index((service, slot)) % 10)
        style = "-" if service == "plain" else "--"
        label = f"{service} worker slot {slot}" if (service, slot) not in labelled else None
        labelled.add((service, slot))
        rss.plot(times, memory, style, color=color, linewidth=0.9, label=label)
        files.plot(times, descriptors, style, color=color, linewidth=0.9, label=label)
    rss.set_ylabel("worker RSS, MiB")
    files.set_ylabel("worker open fds")
    files.set_xlabel("seconds since the load started")
    shown: set[str] = set()
    for fault in outcome.faults:
        color, style = FAULT_STYLES.get(fault.kind, ("black", "-"))
        for axis in axes:
            label = fault.kind if fault.kind not in shown and axis is rps else None
            if fault.kind == "store outage":
                axis.axvspan(
                    fault.at, fault.until or fault.at, color=color, alpha=0.15, label=label
                )
            else:
                axis.axvline(fault.at, color=color, linestyle=style, linewidth=0.9, label=label)
        shown.add(fault.kind)
    rps.set_ylim(bottom=0)
    for axis in axes:
        axis.grid(alpha=0.3)
        right = 1.06 if axis is rps else 1.005  # the first one has a scale on its right
        axis.legend(loc="upper left", bbox_to_anchor=(right, 1.0), fontsize=7)
    axes[0].set_title(
        f"Soak on {outcome.options.store}: {outcome.options.seconds:g} s, faults marked"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(figure)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def markdown(outcome: Outcome, chart_name: str) -> str:
    answers = outcome.answers
    elapsed = max((a.finished for a in answers), default=outcome.origin) - outcome.origin
    latencies = [a.latency * 1000 for a in answers]
    schedule = outcome.schedule
    lines = [
        f"# Soak on {outcome.options.store}",
        "",
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; `python -m tests.system.soak "
        f"--seconds {outcome.options.seconds:g} --store {outcome.options.store}`. How it is "
        "made and what each check means: [docs/soak.md](../../docs/soak.md).",
        "",
        f"- Verdict: **{'PASS' if outcome.passed else 'FAIL'}**",
        f"- Load: {outcome.options.users} users at {outcome.options.rate:g} requests/s each "
        f"at most, and 3 clients over the rate limit, each from an address of its own, "
        "through nginx (the shipped site config) to two gunicorns (2 workers each) on one "
        "store: one with refresh-token rotation, one without",
        f"- {len(answers):,} requests in {elapsed:.0f} s: **{len(answers) / max(elapsed, 1):.0f} "
        f"requests/s**, latency **p50 {percentile(latencies, 0.5):.1f} ms, p99 "
        f"{percentile(latencies, 0.99):.1f} ms**",
        f"- ACCESS_TOKEN_LIFETIME={schedule.access_lifetime}; warm-up {schedule.warmup:.0f} s; "
        f"refresh tokens given out: {sum(outcome.tokens.values()):,} "
        f"({', '.join(f'{n:,} {state}' for state, n in sorted(outcome.tokens.items()))})",
        "",
        f"![soak chart]({chart_name})",
        "",
        "## Checks",
        "",
        *table(
            ["check", "verdict", "detail"],
            [
                [c.name, "PASS" if c.passed else "**FAIL**", c.detail.replace("|", "/")]
                for c in outcome.verdict
            ],
        ),
        "",
        "## Answers by kind and status",
        "",
    ]
    groups: dict[tuple[str, str], list[Answer]] = defaultdict(list)
    for answer in answers:
        groups[(answer.service, answer.label)].append(answer)
    rows = []
    for (service, label), group in sorted(groups.items()):
        statuses = Counter(a.status for a in group)
        shown = ", ".join(f"{status}: {count:,}" for status, count in sorted(statuses.items()))
        times = [a.latency * 1000 for a in group]
        rows.append(
            [
                service,
                label,
                f"{len(group):,}",
                shown,
                f"{percentile(times, 0.5):.1f}",
                f"{percentile(times, 0.99):.1f}",
            ]
        )
    lines += table(["service", "request", "count", "statuses", "p50 ms", "p99 ms"], rows)
    lines += ["", "## Errors (answers not expected)", ""]
    unexpected = [a for a in answers if not a.ok]
    if unexpected:
        counts = Counter(
            (a.status, a.label, excuse(a, outcome) or "NOT ALLOWED") for a in unexpected
        )
        lines += table(
            ["status", "request", "count", "allowed as"],
            [[str(s), label, str(n), why] for (s, label, why), n in sorted(counts.items())],
        )
        refused = [a for a in unexpected if not excuse(a, outcome)][:20]
        if refused:
            lines += ["", "The first answers not allowed:", ""]
            lines += table(
                ["sent at (s)", "took (ms)", "service", "request", "status", "body"],
                [
                    [
                        f"{a.started - outcome.origin:.2f}",
                        f"{a.latency * 1000:.0f}",
                        a.service,
                        a.label,
                        str(a.status),
                        " ".join(a.body.split()).replace("|", "/"),
                    ]
                    for a in refused
                ],
            )
    else:
        lines.append("None.")
    lines += ["", "## Faults", ""]
    lines += table(
        ["at (s)", "fault", "took (s)", "detail"],
        [
            [f"{f.at:.1f}", f.kind, f"{(f.until or f.at) - f.at:.1f}", f.detail]
            for f in outcome.faults
        ],
    )
    lines += ["", "## Workers' memory and open files", ""]
    lines += [
        "Per worker process (a killed worker's replacement is a new PID in the same slot): "
        "its first reading, its first past its own warm-up, and its last. Judged: the "
        f"workers that lived {100 * JUDGED_SPAN:.0f}% of the run past their warm-up.",
        "",
    ]
    judged = judged_workers(outcome)
    warmup = outcome.schedule.warmup
    rows = []
    by_pid: dict[tuple[str, int], list] = defaultdict(list)
    for sample in outcome.samples:
        by_pid[(sample.service, sample.pid)].append(sample)
    for (service, pid), samples in sorted(by_pid.items(), key=lambda item: item[1][0].at):
        first, last = samples[0], samples[-1]
        born = outcome.first_seen.get(pid, first.at)
        warm = next((s for s in samples if s.at >= born + warmup), None)
        growth = "(lived too short)"
        if (service, pid) in judged:
            growth = f"{last.rss_kib / judged[(service, pid)][0].rss_kib - 1:+.1%}"
        rows.append([
            service, str(first.slot), str(pid), f"{first.at:.0f}-{last.at:.0f}",
            f"{first.rss_kib / 1024:.1f}", f"{warm.rss_kib / 1024:.1f}" if warm else "",
            f"{last.rss_kib / 1024:.1f}", growth,
            f"{first.fds} ({first.other_fds}) -> {last.fds} ({last.other_fds})",
        ])  # fmt: skip
    lines += table(
        ["service", "slot", "pid", "seen (s)", "RSS MiB first", "after its warm-up", "last",
         "growth after warm-up", "fds (not sockets), first -> last"],
        rows,
    )  # fmt: skip
    minutes = defaultdict(list)
    for sample in outcome.samples:
        minutes[(sample.service, sample.slot, int(sample.at // 60))].append(sample.rss_kib / 1024)
    lines += ["", "RSS per worker slot, MiB, median of each minute:", ""]
    slots = sorted({(service, slot) for service, slot, _ in minutes})
    last_minute = max((minute for _, _, minute in minutes), default=0)
    lines += table(
        ["minute", *[f"{s} {n}" for s, n in slots]],
        [
            [
                str(m),
                *[
                    f"{statistics.median(minutes[(s, n, m)]):.1f}" if minutes.get((s, n, m)) else ""
                    for s, n in slots
                ],
            ]
            for m in range(last_minute + 1)
        ],
    )
    return "\n".join(lines) + "\n"


def write(outcome: Outcome, folder: Path) -> list[Path]:
    """Write the report and its chart into ``folder``; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    name = f"soak-{outcome.options.store}"
    picture = folder / f"{name}.png"
    chart(outcome, picture)
    text = folder / f"{name}.md"
    text.write_text(markdown(outcome, picture.name))
    return [text, picture]
