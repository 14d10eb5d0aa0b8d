"""Benchmark: the service under gunicorn, as ``make run`` starts it, beside a floor and two peers.

    make bench          # .venv/bin/python -m bench.run: 3 rounds x 5 s, targets, results file
    make bench-short    # .venv/bin/python -m bench.run --short: 1 round x 1 s, statuses only
    make bench-scale    # .venv/bin/python -m bench.run --scale: 1,000,000 stored tokens, RSS
    python -m bench.run --matrix   # the store matrix alone (bench/matrix.py)

In one run, rounds interleaved, wrk drives the same scenarios against:

- the service: ``gunicorn -c gunicorn.conf.py wsgi:app`` with its default settings, but
  for a loopback port, a temporary INSTANCE_PATH and a long ACCESS_TOKEN_LIFETIME;
- the floor (bench/floor_app.py): the same routes answering the service's own responses
  as constants, with no work at all;
- two peers (bench/peers/): SPEC.md in plain Flask + PyJWT, and in Flask-JWT-Extended.

Then the store matrix (bench/matrix.py): /login and /token on each store, against a
floor doing one write or one read on that store.

The floor and the peers run under the service's worker settings (read from gunicorn's
``--print-config``) with gunicorn's standard access log. Every server writes its logs
to a file. The measure is the server's CPU time per request: utime + stime of the
gunicorn master and its workers, from /proc, before and after each wrk run, divided
by the requests wrk completed. Each scenario runs twice: each app alone, on every core
(req/s, latencies, statuses), then paired: the service and one other app at once, on one
CPU (bench/paired.py says why); the targets are judged on the paired ratios. Exit
status: 0, even when a target is missed; 1 when a scenario answered a status it should
not have or wrk saw socket errors; 2 when the bench could not run (a server did not
start, wrk is missing).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench import matrix, paired, report, scale, scenarios, servers
from bench.measure import check_answers, one_run
from bench.paired import Pair, PairSummary
from bench.report import FLOOR, SERVICE, Run, Summary
from bench.scenarios import Credentials, Scenario
from bench.servers import Server

RESULTS = servers.BENCH / "results"
#: The peers: name -> the module gunicorn and ``flask --app`` load from bench/.
PEERS = {
    "peer: Flask+PyJWT": "peers.pyjwt_peer",
    "peer: Flask-JWT-Extended": "peers.jwt_extended_peer",
}


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--short", action="store_true",
        help="every scenario and app once for 1 s, no targets; fails on a wrong status (CI)",
    )  # fmt: skip
    mode.add_argument(
        "--scale", action="store_true",
        help="the service alone: /token on a store of --stored-tokens, and workers' RSS "
        "over --logins logins",
    )  # fmt: skip
    parser.add_argument(
        "--matrix", action="store_true",
        help="the store matrix alone: /login and /token on each store against a store floor "
        "(with --short: once for 1 s)",
    )  # fmt: skip
    parser.add_argument("--seconds", type=int, help="length of one wrk run (default 5; short: 1)")
    parser.add_argument("--rounds", type=int, help="runs per scenario and app (default 3)")
    parser.add_argument(
        "--warmup", type=int, help="seconds of unmeasured load per scenario and app first "
        "(default 1; short: 0)",
    )  # fmt: skip
    parser.add_argument(
        "--stores", default="",
        help="the store matrix's stores, by name, comma-separated (default: every one)",
    )  # fmt: skip
    parser.add_argument(
        "--matrix-rounds", type=int,
        help="paired rounds per request and store in the store matrix (default 5; short: 1)",
    )  # fmt: skip
    parser.add_argument("--connections", type=int, default=16, help="wrk connections (16)")
    parser.add_argument("--threads", type=int, default=1, help="wrk threads (1)")
    parser.add_argument(
        "--distinct-tokens", type=int, default=3000,
        help="tokens of scenario a*, more than the service's per-worker cache (3000)",
    )  # fmt: skip
    parser.add_argument(
        "--stored-tokens", type=int, default=1_000_000,
        help="scale: refresh tokens put in the service's store first (1,000,000)",
    )  # fmt: skip
    parser.add_argument(
        "--logins", type=int, default=100_000, help="scale: logins between two RSS readings"
    )
    parser.add_argument(
        "--warmup-logins", type=int, default=5_000, help="scale: logins before the first reading"
    )
    parser.add_argument(
        "--output", type=Path,
        help="Markdown results file (default: bench/results/latest.md, or scale.md with "
        "--scale; the short mode writes none unless given)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    args.seconds = args.seconds or (1 if args.short else 5)
    args.rounds = args.rounds or (1 if args.short else 3)
    args.warmup = (0 if args.short else 1) if args.warmup is None else args.warmup
    if args.matrix and args.scale:
        parser.error("--matrix and --scale are two modes: one at a time")
    args.matrix_rounds = args.matrix_rounds or (1 if args.short else 5)
    if args.output is None and (args.matrix or not args.short):
        default = "scale.md" if args.scale else "store-matrix.md" if args.matrix else "latest.md"
        args.output = RESULTS / default
    if min(args.seconds, args.rounds, args.matrix_rounds, args.connections, args.threads) < 1:
        parser.error("--seconds, --rounds, --connections and --threads must be at least 1")
    if args.distinct_tokens < 1 or args.logins < 1 or args.stored_tokens < 0:
        parser.error("--distinct-tokens and --logins must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    if shutil.which("wrk") is None:
        print("wrk is needed: apt-get install wrk", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        if args.scale:
            status, markdown = scale.run(args)
        elif args.matrix:
            status, markdown = store_matrix(args)
        else:
            status, markdown = compare(args)
            matrix_status, matrix_markdown = matrix.run(args, args.matrix_rounds)
            status = max(status, matrix_status)
            markdown = "\n".join([markdown, "", matrix_markdown])
    except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as error:
        print(f"bench: cannot run: {error}", file=sys.stderr)
        return 2
    print(markdown)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(markdown + "\n")
        print(f"\nwritten to {args.output}")
    print(f"bench: {time.monotonic() - started:.0f} s wall time, exit status {status}")
    return status


def store_matrix(args: argparse.Namespace) -> tuple[int, str]:
    """Run the store matrix alone; return the exit status and the Markdown report."""
    status, section = matrix.run(args, args.matrix_rounds)
    header = [
        "# Benchmark (store matrix)",
        "",
        f"- date: {datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- code: {code_version()}",
        *report.machine_description(),
        "",
    ]
    return status, "\n".join([*header, section])


def compare(args: argparse.Namespace) -> tuple[int, str]:
    """Run every scenario against every app; return the exit status and the Markdown."""
    scenario_list = scenarios.scenarios(args.distinct_tokens)
    with tempfile.TemporaryDirectory(prefix="bench-") as temporary:
        folder = Path(temporary)
        instance = folder / "instance"
        service_env = servers.service_environment(instance)
        started: list[Server] = []
        try:
            service = servers.service(service_env, folder / "service.log").start()
            started.append(service)
            settings = servers.service_gunicorn_settings(service_env)
            workers = int(settings["workers"])
            peers, peer_secret = start_peers(settings, folder, started)
            service.wait_ready(workers)
            service_secret = servers.service_secret(instance)
            credentials = {SERVICE: credentials_of(service, service_secret, args, folder)}
            answers = check_answers(service, scenario_list, credentials[SERVICE])
            floor_env = {
                **servers.base_environment(),
                "FLOOR_ANSWERS": str(write_floor_answers(folder, scenario_list, answers)),
            }
            floor = servers.plain_app(
                FLOOR, "floor_app:app", settings, floor_env, folder / "floor.log"
            ).start()
            started.append(floor)
            for peer in peers:
                peer.wait_ready(workers)
                credentials[peer.name] = credentials_of(peer, peer_secret, args, folder)
                check_answers(peer, peer_scenarios(scenario_list), credentials[peer.name])
            floor.wait_ready(workers)
            credentials[FLOOR] = credentials[SERVICE]  # the same requests, byte for byte
            check_answers(floor, floor_scenarios(scenario_list), credentials[FLOOR])
            apps = {server.name: server for server in [service, floor, *peers]}
            runs = measure(apps, scenario_list, credentials, args, folder)
            pairs = measure_pairs(apps, scenario_list, credentials, args, folder)
        finally:
            servers.stop_all(started)
            warnings = {server.name: server.log_warnings() for server in started}
    summaries = {
        key: report.summarize(app_runs, expected_status(scenario_list, key[1]))
        for key, app_runs in runs.items()
    }
    pair_summaries = {
        (name, key): paired.summarize(
            pair_list,
            expected_status(scenario_list, key),
            expected_status(
                scenario_list, floor_key_of(scenario_list, key) if name == FLOOR else key
            ),
        )
        for (name, key), pair_list in pairs.items()
    }
    status, markdown = render(args, settings, scenario_list, list(apps), summaries, pair_summaries)
    return status, "\n".join([markdown, *report.log_warnings_section(warnings)])


def peer_scenarios(scenario_list: list[Scenario]) -> list[Scenario]:
    """Return the scenarios the peers answer: all but the service's own endpoints."""
    return [scenario for scenario in scenario_list if scenario.peers]


def floor_scenarios(scenario_list: list[Scenario]) -> list[Scenario]:
    """Return the scenarios the floor answers: those it is the measure of."""
    return [scenario for scenario in scenario_list if scenario.key == scenario.floor_key]


def write_floor_answers(
    folder: Path, scenario_list: list[Scenario], answers: dict[str, scenarios.Answer]
) -> Path:
    """Write the floor's constant answers, the service's own, by route; return the file."""
    path = folder / "floor.json"
    service_answers = {s.route: answers[s.key] for s in floor_scenarios(scenario_list)}
    path.write_text(json.dumps(scenarios.floor_answers(service_answers)))
    return path


def floor_key_of(scenario_list: list[Scenario], key: str) -> str:
    return next(s.floor_key for s in scenario_list if s.key == key)


def expected_status(scenario_list: list[Scenario], key: str) -> int:
    return next(s.expected_status for s in scenario_list if s.key == key)


def start_peers(
    settings: dict[str, str], folder: Path, started: list[Server]
) -> tuple[list[Server], str]:
    """Start both peers, each with its own SQLite file; return them and their secret."""
    secret = secrets.token_urlsafe(48)
    environments = {
        name: {
            **servers.base_environment(),
            "FLASK_SECRET_KEY": secret,
            "FLASK_DATABASE": str(folder / f"peer-{index}.sqlite3"),
            "FLASK_ACCESS_TOKEN_LIFETIME": "86400",
        }
        for index, name in enumerate(PEERS)
    }
    with ThreadPoolExecutor() as pool:  # two `flask init-db` at once: a quicker start
        list(pool.map(servers.init_peer_database, PEERS.values(), environments.values()))
    peers = []
    for index, (name, module) in enumerate(PEERS.items()):
        peer = servers.plain_app(
            name, f"{module}:app", settings, environments[name], folder / f"peer-{index}.log"
        )
        started.append(peer.start())
        peers.append(peer)
    return peers, secret


def credentials_of(server: Server, secret: str, args: argparse.Namespace, folder: Path):
    return scenarios.credentials(server.url, secret, args.distinct_tokens, folder)


def measure(
    apps: dict[str, Server],
    scenario_list: list[Scenario],
    credentials: dict[str, Credentials],
    args: argparse.Namespace,
    folder: Path,
) -> dict[tuple[str, str], list[Run]]:
    """Run the rounds: each scenario against each app in turn, the apps' order rotating."""
    floor_keys = {scenario.key for scenario in floor_scenarios(scenario_list)}

    def apps_of(scenario: Scenario) -> list[str]:
        return [
            name
            for name in apps
            if (name != FLOOR or scenario.key in floor_keys)
            and (name not in PEERS or scenario.peers)
        ]

    if args.warmup:
        for scenario in scenario_list:
            for name in apps_of(scenario):
                one_run(apps[name], scenario, credentials[name], args, folder, args.warmup)
    runs: dict[tuple[str, str], list[Run]] = {}
    for round_number in range(args.rounds):
        for scenario in scenario_list:
            names = apps_of(scenario)
            shift = round_number % len(names)
            for name in names[shift:] + names[:shift]:
                run = one_run(apps[name], scenario, credentials[name], args, folder, args.seconds)
                runs.setdefault((name, scenario.key), []).append(run)
                progress(round_number, scenario, name, run)
    return runs


def measure_pairs(
    apps: dict[str, Server],
    scenario_list: list[Scenario],
    credentials: dict[str, Credentials],
    args: argparse.Namespace,
    folder: Path,
) -> dict[tuple[str, str], list[Pair]]:
    """Run the service beside each other app at once, on one CPU (bench/paired.py).

    Keys: (the other app, the service's scenario); the floor answers the scenario it
    is the measure of (its a for a*, e and g). Each wrk gets half the connections.
    """
    by_key = {scenario.key: scenario for scenario in scenario_list}
    connections = max(1, args.connections // 2)
    service = apps[SERVICE]
    pairs: dict[tuple[str, str], list[Pair]] = {}
    with paired.pinned(list(apps.values())):
        for round_number in range(args.rounds):
            for scenario in scenario_list:
                for name, other in apps.items():
                    if name == SERVICE or (name in PEERS and not scenario.peers):
                        continue
                    theirs = by_key[scenario.floor_key] if name == FLOOR else scenario
                    mine = (service, scenario, credentials[SERVICE], args, folder, args.seconds)
                    yours = (other, theirs, credentials[name], args, folder, args.seconds)
                    pair = paired.run_pair(
                        functools.partial(one_run, *mine, connections),
                        functools.partial(one_run, *yours, connections),
                    )
                    pairs.setdefault((name, scenario.key), []).append(pair)
                    pair_progress(round_number, scenario, name, pair)
    return pairs


def pair_progress(round_number: int, scenario: Scenario, name: str, pair: Pair) -> None:
    ratio = pair.ratio
    print(
        f"round {round_number + 1} {scenario.key:2} paired with {name:26} "
        f"{'n/a' if ratio is None else f'{ratio:5.2f}'}x",
        file=sys.stderr,
        flush=True,
    )


def progress(round_number: int, scenario: Scenario, name: str, run: Run) -> None:
    cost = run.cpu_us_per_request
    print(
        f"round {round_number + 1} {scenario.key:2} {name:26} "
        f"{'n/a' if cost is None else f'{cost:6.0f}'} µs/req {run.wrk.requests_per_second:7.0f} "
        f"req/s statuses {run.wrk.statuses} socket errors {run.wrk.socket_error_count}",
        file=sys.stderr,
        flush=True,
    )


def settings_lines(args: argparse.Namespace, settings: dict[str, str]) -> list[str]:
    worker_settings = ", ".join(
        f"{name}={settings[name]}" for name in ("workers", "worker_class", "threads", "keepalive")
    )
    return [
        f"- date: {datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- code: {code_version()}",
        f"- gunicorn worker settings of every app (from the service's gunicorn.conf.py): "
        f"{worker_settings}; service logging: its own (loglevel={settings.get('loglevel')}, "
        f"logger_class={settings.get('logger_class')}); floor and peers: gunicorn's standard "
        "access log; every server's output goes to a file",
        f"- wrk: {args.threads} thread(s), {args.connections} connections, {args.rounds} "
        f"round(s) x {args.seconds} s per scenario and app, rounds interleaved, "
        f"{args.warmup} s warm-up each; loopback",
        "- CPU µs/req: utime+stime of the gunicorn master and workers (/proc) over the "
        "requests wrk completed; medians over rounds; a*, e and g are compared with the floor's a",
        "- paired runs (the targets): the service and one other app loaded at once, both "
        "apps' gunicorn on one CPU, their two wrk (half the connections each) on the others; "
        "the ratio of their CPU per request in each round, median over rounds (bench/paired.py)",
    ]


def code_version(root: Path = servers.ROOT) -> str:
    """Return the commit measured, and which tracked files differed from it, if any."""

    def git(*arguments: str) -> str:
        return subprocess.run(
            ["git", *arguments], cwd=root, capture_output=True, text=True,
            timeout=10, check=False,
        ).stdout.strip()  # fmt: skip

    commit = git("rev-parse", "--short", "HEAD") or "unknown commit"
    changed = git("diff", "HEAD", "--name-only").splitlines()
    if not changed:
        return commit
    return f"{commit} with uncommitted changes to {', '.join(changed)}"


def render(
    args: argparse.Namespace,
    settings: dict[str, str],
    scenario_list: list[Scenario],
    apps: list[str],
    summaries: dict[tuple[str, str], Summary],
    pair_summaries: dict[tuple[str, str], PairSummary],
) -> tuple[int, str]:
    """Return the exit status and the Markdown report of a comparison."""
    mode = "short" if args.short else "full"
    parts = [
        f"# Benchmark ({mode} mode)",
        "",
        *settings_lines(args, settings),
        *report.machine_description(),
    ]
    if not args.short:
        peers = [name for name in apps if name in PEERS]
        found = report.targets(scenario_list, pair_summaries, peers)
        parts += ["", "## Targets (paired runs)", "", report.targets_table(found)]
    parts += [
        "",
        "## Paired runs: the service and another app at once, on one CPU",
        "",
        report.pairs_table(scenario_list, apps, pair_summaries),
        "",
        "## Each app alone: CPU per request, throughput and latency",
        "",
        report.results_table(scenario_list, apps, summaries),
    ]
    wrong = [f"{app} {key}" for (app, key), summary in summaries.items() if not summary.ok]
    wrong += [
        f"{SERVICE} and {app} {key}, paired"
        for (app, key), summary in pair_summaries.items()
        if not summary.ok
    ]
    if wrong:
        parts += ["", f"**Unexpected statuses or socket errors in: {', '.join(wrong)}**"]
    return (1 if wrong else 0), "\n".join(parts)


if __name__ == "__main__":
    sys.exit(main())
