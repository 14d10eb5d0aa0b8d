"""The store matrix: ``POST /login`` and ``POST /token`` on each store, against a store floor.

For each store in BACKENDS, in turn: the store (a redis-server with AOF, a PostgreSQL
of the run's own; SQLite is a file), the service on it (``TOKEN_STORE_URL``), and the
floor (bench/floor_app.py) answering the service's own responses as constants but
for one write per login and one read per refresh on the same store, made as
bench/store_floor.py says. Then, each round, each request on both apps at once on one
CPU (bench/paired.py): the ratio of their CPU per request, the median over rounds.

Both apps do the same non-store work as in the main bench's b and c (no user
directory: no password check), and the floor does none of the service's parsing,
signing or logging: the ratio is the service's whole request over the least a plain
app with that store can do. The store servers' own CPU is not counted (the service and
the floor share one), only each app's gunicorn master and workers, as everywhere else.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import secrets
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from bench import paired, procstat, scenarios, servers, store_floor, store_servers
from bench.measure import check_answers, one_run
from bench.paired import Pair, PairSummary
from bench.report import FLOOR, Run
from bench.scenarios import Credentials, Scenario
from bench.servers import Server

#: Highest CPU per request of the service, as a multiple of the store floor's.
MATRIX_TARGET = 1.10
#: The matrix's requests: the main bench's b and c, and what the floor does for each.
REQUESTS = {"b": ("login", "one write"), "c": ("refresh", "one read")}


@dataclass(frozen=True)
class Stores:
    """Where one backend's service and floor keep their tokens."""

    service_url: str | None  # None: the service's default (a SQLite file in its instance)
    floor_url: str
    pid: int | None  # the store server's main process, if it has one
    description: str


@dataclass(frozen=True)
class Backend:
    """A store of the matrix: why it cannot run here (or None), and how to start it."""

    name: str
    missing: Callable[[], str | None]
    start: Callable[[Path], AbstractContextManager[Stores]]


@contextlib.contextmanager
def sqlite_stores(folder: Path) -> Iterator[Stores]:
    yield Stores(
        None,
        f"sqlite:///{folder / 'floor.sqlite3'}",
        None,
        "SQLite: a file each in one folder, WAL, synchronous=NORMAL for a login (the "
        "service's default TOKEN_STORE_DURABILITY=normal)",
    )


@contextlib.contextmanager
def redis_stores(folder: Path) -> Iterator[Stores]:
    with store_servers.redis_server(folder / "redis") as server:
        yield Stores(
            server.url,
            server.url,
            server.pid,
            f"Redis: one redis-server {_redis_version()} for both, "
            f"{' '.join(store_servers.REDIS_DURABLE)} (docs/operations.md's settings)",
        )


@contextlib.contextmanager
def postgres_stores(_folder: Path) -> Iterator[Stores]:
    with store_servers.postgres_server() as server:
        yield Stores(
            server.url,
            server.url,
            server.pid,
            "PostgreSQL: one server for both, initdb's defaults (fsync, synchronous_commit on)",
        )


def postgres_missing() -> str | None:
    """Return why the PostgreSQL row cannot run here, or None."""
    from app.config.store_url import parse_store_url

    try:
        parse_store_url("postgresql://bench@127.0.0.1:5432/postgres")
    except ValueError:
        return "the service does not take a postgresql:// TOKEN_STORE_URL yet"
    try:
        import psycopg  # noqa: F401 (the floor's client)
    except ImportError:
        return "psycopg is not installed (the floor's client)"
    return store_servers.postgres_missing()


#: The stores, in the order they run. A new store is one line here.
BACKENDS = [
    Backend("SQLite", lambda: None, sqlite_stores),
    Backend("Redis", store_servers.redis_missing, redis_stores),
    Backend("PostgreSQL", postgres_missing, postgres_stores),
]


@dataclass
class Outcome:
    """One backend's pairs by scenario key, or why it did not run."""

    name: str
    description: str = ""
    pairs: dict[str, list[Pair]] | None = None
    skipped: str | None = None


def matrix_scenarios() -> list[Scenario]:
    return [s for s in scenarios.scenarios(1) if s.key in REQUESTS]


def run(args: argparse.Namespace, rounds: int) -> tuple[int, str]:
    """Run every backend of the matrix; return the exit status and the Markdown section."""
    outcomes = []
    chosen = {name.strip().lower() for name in getattr(args, "stores", "").split(",") if name}
    unknown = chosen - {backend.name.lower() for backend in BACKENDS}
    if unknown:
        raise ValueError(f"no store named {', '.join(sorted(unknown))} in the matrix")
    for backend in BACKENDS:
        if chosen and backend.name.lower() not in chosen:
            continue
        reason = backend.missing()
        if reason is not None:
            print(f"store matrix: {backend.name} skipped: {reason}", file=sys.stderr)
            outcomes.append(Outcome(backend.name, skipped=reason))
            continue
        with tempfile.TemporaryDirectory(prefix="bench-matrix-") as temporary:
            outcomes.append(measure_backend(backend, args, rounds, Path(temporary)))
    return render(args, rounds, outcomes)


def measure_backend(
    backend: Backend, args: argparse.Namespace, rounds: int, folder: Path
) -> Outcome:
    """Start the store, the service and the floor on it; run the paired rounds."""
    scenario_list = matrix_scenarios()
    started: list[Server] = []
    with backend.start(folder) as stores:
        try:
            instance = folder / "instance"
            service_env = servers.service_environment(instance)
            if stores.service_url is not None:
                service_env["TOKEN_STORE_URL"] = stores.service_url
            service = servers.service(service_env, folder / "service.log").start()
            started.append(service)
            settings = servers.service_gunicorn_settings(service_env)
            service.wait_ready(int(settings["workers"]))
            credentials = scenarios.credentials(
                service.url, servers.service_secret(instance), 1, folder
            )
            answers = check_answers(service, scenario_list, credentials)
            floor = start_floor(stores, scenario_list, answers, settings, folder)
            started.append(floor)
            floor.wait_ready(int(settings["workers"]))
            check_answers(floor, scenario_list, credentials)
            pairs = measure_pairs(service, floor, stores, scenario_list, credentials, args, rounds,
                                  folder)  # fmt: skip
        finally:
            servers.stop_all(started)
    return Outcome(backend.name, stores.description, pairs)


def start_floor(
    stores: Stores,
    scenario_list: list[Scenario],
    answers: dict[str, scenarios.Answer],
    settings: dict[str, str],
    folder: Path,
) -> Server:
    """Prepare the floor's store and start the floor on it, with the service's answers."""
    known_digest = secrets.token_hex(32)
    store_floor.prepare(stores.floor_url, known_digest)
    answers_path = folder / "floor.json"
    answers_path.write_text(
        json.dumps(scenarios.floor_answers({s.route: answers[s.key] for s in scenario_list}))
    )
    env = {
        **servers.base_environment(),
        "FLOOR_ANSWERS": str(answers_path),
        "FLOOR_STORE_URL": stores.floor_url,
        "FLOOR_KNOWN_DIGEST": known_digest,
    }
    return servers.plain_app(FLOOR, "floor_app:app", settings, env, folder / "floor.log").start()


def measure_pairs(
    service: Server,
    floor: Server,
    stores: Stores,
    scenario_list: list[Scenario],
    credentials: Credentials,
    args: argparse.Namespace,
    rounds: int,
    folder: Path,
) -> dict[str, list[Pair]]:
    """Warm both apps up, then run each scenario on both at once, each round (paired)."""
    if args.warmup:
        for scenario in scenario_list:
            for app in (service, floor):
                one_run(app, scenario, credentials, args, folder, args.warmup)
    half = max(1, args.connections // 2)
    pairs: dict[str, list[Pair]] = {}
    with paired.pinned([service, floor]), store_server_pinned(stores.pid):
        for round_number in range(rounds):
            for scenario in scenario_list:
                pair = paired.run_pair(
                    functools.partial(
                        one_run, service, scenario, credentials, args, folder, args.seconds, half
                    ),
                    functools.partial(
                        one_run, floor, scenario, credentials, args, folder, args.seconds, half
                    ),
                )
                pairs.setdefault(scenario.key, []).append(pair)
                print(
                    f"store matrix round {round_number + 1} {REQUESTS[scenario.key][0]:8} "
                    f"service / floor {pair.ratio or 0:5.2f}x ({_cost(pair.service)} / "
                    f"{_cost(pair.other)} µs) statuses {pair.service.wrk.statuses} "
                    f"{pair.other.wrk.statuses}",
                    file=sys.stderr,
                    flush=True,
                )
    return pairs


def _cost(run: Run) -> str:
    cost = run.cpu_us_per_request
    return "n/a" if cost is None else f"{cost:.0f}"


@contextlib.contextmanager
def store_server_pinned(pid: int | None) -> Iterator[None]:
    """Keep the store server (and its children) off the apps' CPU during the pairs."""
    allowed = os.sched_getaffinity(0)  # inside paired.pinned: wrk's CPUs
    everything = set(range(os.cpu_count() or 1))
    if pid is None or allowed == everything:
        yield
        return
    tree = _process_tree(pid)
    for process in tree:
        _set_affinity(process, allowed)
    try:
        yield
    finally:
        for process in tree:
            _set_affinity(process, everything)


def _process_tree(pid: int) -> list[int]:
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            pending.extend(procstat.children(current))
    return found


def _set_affinity(pid: int, cpus: set[int]) -> None:
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(task), cpus)


def _redis_version() -> str:
    import subprocess

    output = subprocess.run(
        ["redis-server", "--version"], capture_output=True, text=True, timeout=10, check=False
    ).stdout
    return next((part[2:] for part in output.split() if part.startswith("v=")), "")


def render(args: argparse.Namespace, rounds: int, outcomes: list[Outcome]) -> tuple[int, str]:
    """Return the exit status and the Markdown section of the matrix."""
    by_key = {scenario.key: scenario for scenario in matrix_scenarios()}
    lines = [
        "## Store matrix: the service against a floor doing one store operation (paired)",
        "",
        f"- {rounds} round(s) x {args.seconds} s per request and store, after "
        f"{args.warmup} s of warm-up each; the service and the floor at once on one CPU, "
        f"their two wrk ({max(1, args.connections // 2)} connections each) on the others; "
        "the store server kept off that CPU; CPU µs/req of each app's gunicorn master and "
        "workers; the ratio is the median of the rounds' (bench/matrix.py)",
        "- the floor: the service's own answers as constants, plus one write per login or "
        "one read per refresh on the same store (bench/store_floor.py)",
    ]
    lines += [f"- {outcome.description}" for outcome in outcomes if outcome.description]
    lines += [
        "",
        "| store | request | floor does | service CPU µs/req | floor CPU µs/req "
        "| service / floor, median | lowest - highest | rounds | target | verdict |",
        "|---|---|---|---:|---:|---:|---|---:|---|---|",
    ]
    wrong = []
    for outcome in outcomes:
        if outcome.pairs is None:
            lines.append(f"| {outcome.name} | - | - | | | | | | | not run: {outcome.skipped} |")
            continue
        for key, pair_list in outcome.pairs.items():
            summary = paired.summarize(pair_list, 200, 200)
            name, does = REQUESTS[key]
            if not summary.ok:
                wrong.append(f"{outcome.name} {name}")
            lines.append(
                f"| {outcome.name} | {name}: {by_key[key].method} {by_key[key].path} | {does} "
                f"| {_number(summary.service_us)} | {_number(summary.other_us)} "
                f"| {_ratio(summary.ratio)} | {_spread(summary)} | {summary.rounds} "
                f"| <= {MATRIX_TARGET:.2f}x | {_verdict(args, summary)} |"
            )
    if wrong:
        lines += ["", f"**Unexpected statuses or socket errors in: {', '.join(wrong)}**"]
    return (1 if wrong else 0), "\n".join(lines)


def _verdict(args: argparse.Namespace, summary: PairSummary) -> str:
    if args.short or summary.ratio is None:
        return "n/a"
    if not summary.ok:
        return "**wrong statuses**"
    return "met" if round(summary.ratio, 2) <= MATRIX_TARGET else "**missed**"


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def _spread(summary: PairSummary) -> str:
    if summary.lowest is None or summary.highest is None:
        return "n/a"
    return f"{summary.lowest:.2f} - {summary.highest:.2f}"
