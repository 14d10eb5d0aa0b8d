"""The bench: the service held against other apps, in pairs on one CPU (docs/performance.md).

    make bench                       # main, matrix, gateway, rules: 5 rounds x 5 s, targets
    make bench-short                 # every group, every pair once for 1 s (CI)
    make bench-scale                 # /token and /sessions on 1,000,000 stored tokens, RSS

Groups (``--only``): ``main`` (requests a to g, the OAuth grant h and introspection i, and
GET /sessions s against the floor, a to f against two peers too), ``matrix`` (login and
refresh on each store against a floor making one store call), ``gateway`` (a protected
path through nginx with the service's check, against nginx alone), ``rules`` (the check
with no rules, with 100 rules and the match the last, and Envoy's prefix route, each
against the floor's GET), ``scale`` (the service
on a full store against an empty one, refreshing and listing the holder's sessions, and
its workers' memory over many logins). Exit status: 0, even when a target is missed; 1
when an answer had another status than expected or wrk saw socket errors; 2 when the
bench could not run.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import paired, report, servers, wrk
from bench.scenarios import GROUPS, SERVICE, STORES, cases

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_GROUPS = ("main", "matrix", "gateway", "rules")
#: Largest change of a worker's RSS over the scale group's logins, either way.
RSS_LIMIT = 0.10


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 2)[2],
    )  # fmt: skip
    option = parser.add_argument
    option("--short", action="store_true", help="every group once for 1 s, no verdicts (CI)")
    option("--only", help=f"groups, comma-separated, of {', '.join(GROUPS)} (default: "
           f"{', '.join(DEFAULT_GROUPS)}; short: all)")  # fmt: skip
    option("--stores", default=",".join(STORES), help="stores of matrix and scale (all)")
    option("--seconds", type=int, help="length of one wrk run (5; short: 1)")
    option("--rounds", type=int, help="rounds per pair (5; short: 1)")
    option("--warmup", type=int, help="seconds of unmeasured load per pair first (1; short: 0)")
    option("--connections", type=int, default=16, help="wrk connections, half a side (16)")
    option("--threads", type=int, default=1, help="wrk threads (1)")
    option("--distinct-tokens", type=int, default=3000, help="tokens cycled by a* (3000)")
    option("--stored-tokens", type=int, help="scale: tokens in the full store (1,000,000)")
    option("--logins", type=int, help="scale: logins between two RSS readings (100,000)")
    option("--output", type=Path, help="Markdown report (default bench/results/latest.md, or "
           "<groups>.md with --only; the short mode writes none unless given)")  # fmt: skip
    args = parser.parse_args(argv)
    short = args.short
    args.seconds = args.seconds or (1 if short else 5)
    args.rounds = args.rounds or (1 if short else 5)
    args.warmup = (0 if short else 1) if args.warmup is None else args.warmup
    args.stored_tokens = args.stored_tokens or (2_000 if short else 1_000_000)
    args.logins = args.logins or (1_000 if short else 100_000)
    args.groups = tuple(args.only.split(",")) if args.only else GROUPS if short else DEFAULT_GROUPS
    args.stores = tuple(args.stores.split(","))
    if unknown := (set(args.groups) - set(GROUPS)) | (set(args.stores) - set(STORES)):
        parser.error(f"no group or store named {', '.join(sorted(unknown))}")
    if min(args.seconds, args.rounds, args.connections, args.threads, args.logins) < 1:
        parser.error("--seconds, --rounds, --connections, --threads and --logins must be >= 1")
    if args.output is None and not short:
        name = "latest" if args.groups == DEFAULT_GROUPS else "-".join(args.groups)
        args.output = RESULTS / f"{name}.md"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    if shutil.which("wrk") is None:
        print("wrk is needed: apt-get install wrk", file=sys.stderr)
        return 2
    started = time.monotonic()
    sections: dict[str, list[paired.Summary]] = {}
    notes: dict[str, list[str]] = {}
    warnings: dict[str, list[str]] = {}
    try:
        for group in args.groups:
            stores = []
            for store in args.stores if group in ("matrix", "scale") else ():
                why = servers.missing(store)
                if why is None:
                    stores.append(store)
                else:
                    notes.setdefault(group, []).append(f"- {store} not run: {why}")
            with tempfile.TemporaryDirectory(prefix=f"bench-{group}-") as folder:
                args.folder = folder
                with servers.Stack(Path(folder), args.distinct_tokens) as stack:
                    case_list = cases((group,), tuple(stores), args.stored_tokens)
                    pairs = paired.run_group(stack, case_list, args)
                    if group == "scale":
                        notes["scale-after"] = memory_over_logins(stack, args)
                    warnings |= stack.warnings()
            sections[group] = [paired.summarize(case, pairs[case]) for case in case_list]
    except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as error:
        print(f"bench: cannot run: {error}", file=sys.stderr)
        return 2
    markdown = report.document(args, sections, notes, warnings)
    print(markdown)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(markdown)
        print(f"written to {args.output}")
    wrong = [s.case for summaries in sections.values() for s in summaries if not s.ok]
    wrong_memory = any("wrong statuses" in line for line in notes.get("scale-after", []))
    status = 1 if wrong or wrong_memory else 0
    print(f"bench: {time.monotonic() - started:.0f} s wall time, exit status {status}")
    return status


def memory_over_logins(stack: servers.Stack, args: Any) -> list[str]:
    """Read each service worker's RSS after some logins, then after ``--logins`` more."""
    service = stack.side(SERVICE).service
    assert service is not None
    url = service.env["TOKEN_STORE_URL"]
    workers = servers.children(service.pid)

    def logins(count: int) -> wrk.WrkResult:
        target, last = servers.stored(url) + count, [0, time.monotonic()]

        def done() -> bool:  # grown enough, or stopped growing (a failed login adds no row)
            now = servers.stored(url)
            if now != last[0]:
                last[:] = [now, time.monotonic()]
            return now >= target or time.monotonic() - last[1] > 5

        per_thread = -(-count // args.threads)
        return wrk.run_until(
            f"{service.url}/login", wrk.counted_logins_script(per_thread),
            Path(args.folder) / "logins.lua", done, seconds=1200,
            connections=args.connections, threads=args.threads,
        )  # fmt: skip

    warmup = max(100, args.logins // 20)
    logins(warmup)
    before = {pid: servers.rss_kib(pid) for pid in workers}
    result = logins(args.logins)
    rss = {pid: (before[pid], servers.rss_kib(pid)) for pid in workers}
    replaced = sorted(set(workers) ^ set(servers.children(service.pid)))
    answered_ok = set(result.statuses) == {200} and not result.socket_error_count
    met = (
        answered_ok
        and not replaced
        and result.requests >= args.logins
        and all(b and a is not None and abs(a / b - 1) <= RSS_LIMIT for b, a in rss.values())
    )
    memory = {"logins": result.requests, "warmup": warmup, "rss": rss, "replaced": replaced,
              "statuses": result.statuses, "met": met}  # fmt: skip
    lines = report.memory_table(memory, RSS_LIMIT)
    return lines if answered_ok else [*lines, "", "**Logins: wrong statuses**"]


if __name__ == "__main__":
    sys.exit(main())
