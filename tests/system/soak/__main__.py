"""``python -m tests.system.soak``: the soak on each store asked; exit status 1 if a check failed.

    make soak                       # 600 s on SQLite, then 600 s on Redis
    make soak SOAK_SECONDS=120      # what CI runs
    .venv/bin/python -m tests.system.soak --seconds 60 --store sqlite

Exit status: 0 when every check passed on every store, 1 when one failed, 2 when the
soak could not run (a server did not start, nginx or redis-server missing).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from tests.system.soak import report
from tests.system.soak.run import Options, soak

#: Where each run's report goes: a folder git ignores, so a run leaves `git status`
#: clean. A report is published on purpose, by copying it to bench/results/ and
#: committing it (docs/soak.md).
RUNS = Path(__file__).resolve().parents[3] / "bench" / "results" / "runs"
FAULTS = ("kill", "hup", "keys", "store")


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.system.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--seconds", type=float, default=600, help="length of each store's run (600)"
    )
    parser.add_argument(
        "--store",
        action="append",
        choices=("sqlite", "redis"),
        help="the store to run on, repeatable (default: sqlite, then redis)",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=RUNS,
        help="where soak-<store>.md and .png go (bench/results/runs, which git ignores)",
    )
    parser.add_argument("--users", type=int, default=24, help="users, each its own address (24)")
    parser.add_argument("--rate", type=float, default=12.0, help="requests a second per user (12)")
    parser.add_argument(
        "--faults",
        default=",".join(FAULTS),
        help=f"which faults, comma-separated (default: {','.join(FAULTS)})",
    )
    parser.add_argument(
        "--lose-token",
        action="store_true",
        help="also remove one kept token from the store behind the service's "
        "back: the soak must then fail (the harness's own test)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the servers' folders and logs")
    return parser.parse_args(argv)


def stop_on_term(signal_number: int, frame: object) -> None:
    sys.exit(128 + signal_number)  # through every finally: the servers are stopped


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    if args.seconds < 5:
        print("--seconds must be at least 5", file=sys.stderr)
        return 2
    faults = {name for name in args.faults.split(",") if name}
    if faults - set(FAULTS):
        print(f"unknown faults: {sorted(faults - set(FAULTS))}", file=sys.stderr)
        return 2
    status = 0
    for store in args.store or ["sqlite", "redis"]:
        folder = Path(tempfile.mkdtemp(prefix=f"soak-{store}-"))
        options = Options(
            store, args.seconds, folder, args.users, args.rate, faults, args.lose_token
        )
        print(f"soak on {store}: {args.seconds:g} s, servers in {folder}", flush=True)
        try:
            outcome = soak(options)
        except RuntimeError as error:
            print(f"soak on {store} could not run: {error}", file=sys.stderr)
            return 2
        finally:
            if not args.keep:
                shutil.rmtree(folder, ignore_errors=True)
        if args.keep:  # the run's data, to render its report again (report.py)
            import pickle

            (folder / "outcome.pickle").write_bytes(pickle.dumps(outcome))
        written = report.write(outcome, args.results)
        for check in outcome.verdict:
            print(f"  {'PASS' if check.passed else 'FAIL'}  {check.name}: {check.detail}")
        print(f"  report: {', '.join(str(path) for path in written)}", flush=True)
        if not outcome.passed:
            status = 1
    return status


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, stop_on_term)
    sys.exit(main())
