"""Scale mode: /token on a store of a million refresh tokens; workers' memory over many logins.

(i) On each store (SQLite; Redis, when a redis-server is installed: one of the run's own,
with AOF, the empty store in database 1 and the full one in database 0), two services
run side by side, one on an empty store, one on a store prefilled with
``--stored-tokens`` refresh tokens, laid out as the store keeps them; in each round both
take ``POST /token`` at once, on one CPU (paired, as bench/paired.py explains), and the
median of the rounds' ratios of CPU per request, full store over empty, must stay
within 1.05x.
(ii) On the empty-store service, after ``--warmup-logins`` logins, each worker's VmRSS
is read, then again after ``--logins`` more: each must stay within ±10%.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import paired, report, scenarios, servers, store_servers, wrk
from bench.report import Run
from bench.servers import Server

#: Highest CPU per /token request on the full store, as a multiple of the empty store's.
FULL_STORE_LIMIT = 1.05
#: Largest change of a worker's RSS over the logins, either way.
RSS_LIMIT = 0.10
#: Upper bound of one counted-logins run, in seconds.
LOGIN_SECONDS_CAP = 1200


def prefill(path: Path, count: int, batch: int = 50_000) -> float:
    """Fill a new store file with ``count`` refresh tokens, as the store keeps them.

    The store's own schema and digest function; rows go in by batches, sorted within
    each, in one transaction. Return the seconds it took.
    """
    from app.backends.interface import token_digest
    from app.backends.sqlite.tables import SCHEMA

    started = time.monotonic()
    salt = os.urandom(16).hex()
    issued_at = int(time.time())
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode = WAL")
        connection.executescript(SCHEMA)
        connection.execute("PRAGMA cache_size = -524288")  # 512 MiB: the tree stays in memory
        connection.execute("BEGIN")
        for start in range(0, count, batch):
            rows = sorted(
                (token_digest(f"{salt}-{number}"), f"user{number // 4}", issued_at)
                for number in range(start, min(start + batch, count))
            )
            connection.executemany(
                "INSERT INTO refresh_tokens (digest, username, issued_at) VALUES (?, ?, ?)", rows
            )
        connection.execute("COMMIT")
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()
    os.chmod(path, 0o600)
    return time.monotonic() - started


def stored_tokens(path: Path) -> int:
    """Return how many refresh tokens the store file holds (read-only)."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return connection.execute("SELECT count(*) FROM refresh_tokens").fetchone()[0]
    finally:
        connection.close()


@dataclass(frozen=True)
class StoreScale:
    """One store's /token rounds: full over empty, and how the full store was filled."""

    name: str
    fill_seconds: float
    stored: int  # tokens in the full store at the end of the run
    pairs: list[paired.Pair]


def run(args: argparse.Namespace) -> tuple[int, str]:
    """Run both scale checks; return the exit status and the Markdown report."""
    from app.config.settings import SQLITE_FILE_NAME

    with tempfile.TemporaryDirectory(prefix="bench-scale-") as temporary:
        folder = Path(temporary)
        instances = {"empty store": folder / "empty", "full store": folder / "full"}
        for instance in instances.values():
            instance.mkdir(mode=0o700)
        print(f"filling a store with {args.stored_tokens:,} refresh tokens ...", flush=True)
        fill_seconds = prefill(instances["full store"] / SQLITE_FILE_NAME, args.stored_tokens)
        settings = servers.service_gunicorn_settings(
            servers.service_environment(instances["empty store"])
        )
        started: list[Server] = []
        try:
            empty, full = start_pair(instances, {}, settings, folder, started)
            token_runs = refresh_rounds([empty, full], args, folder)
            full.stop()  # its workers leave the cores and the memory to the other
            memory = memory_over_logins(
                empty, instances["empty store"] / SQLITE_FILE_NAME, args, folder
            )
            total_stored = stored_tokens(instances["full store"] / SQLITE_FILE_NAME)
        finally:
            servers.stop_all(started)
        results = [StoreScale("SQLite", fill_seconds, total_stored, token_runs)]
        if store_servers.redis_missing() is None:
            results.append(redis_scale(args, settings, folder / "redis", started))
        warnings = {server.name: server.log_warnings() for server in started}
    status, markdown = render(args, settings, results, memory)
    return status, "\n".join([markdown, *report.log_warnings_section(warnings)])


def start_pair(
    instances: dict[str, Path],
    urls: dict[str, str],
    settings: dict[str, str],
    folder: Path,
    started: list[Server],
) -> tuple[Server, Server]:
    """Start the service on the empty and on the full store (``urls``: TOKEN_STORE_URL by
    instance name, else the instance's SQLite file); return them, empty first."""
    for name, instance in instances.items():
        env = servers.service_environment(instance)
        if name in urls:
            env["TOKEN_STORE_URL"] = urls[name]
        server = servers.service(env, folder / f"{instance.name}.log")
        server.name = f"service, {name}" + (f" ({urls[name].split(':')[0]})" if urls else "")
        started.append(server.start())
    empty, full = started[-2:]
    for server in (empty, full):
        server.wait_ready(int(settings["workers"]))
    return empty, full


def redis_scale(
    args: argparse.Namespace, settings: dict[str, str], folder: Path, started: list[Server]
) -> StoreScale:
    """Run /token on an empty and on a full Redis store (two databases of one server)."""
    import redis

    with store_servers.redis_server(folder) as server:
        urls = {"empty store": server.url.removesuffix("/0") + "/1", "full store": server.url}
        print(f"filling Redis with {args.stored_tokens:,} refresh tokens ...", flush=True)
        fill_seconds = prefill_redis(server.url, args.stored_tokens)
        instances = {name: folder / name.split()[0] for name in urls}
        for instance in instances.values():
            instance.mkdir(mode=0o700)
        first = len(started)
        try:
            empty, full = start_pair(instances, urls, settings, folder, started)
            pairs = refresh_rounds([empty, full], args, folder)
        finally:
            servers.stop_all(started[first:])
        with redis.Redis.from_url(server.url, socket_timeout=30) as client:
            stored = int(client.zcard("rt:digests"))
    return StoreScale("Redis", fill_seconds, stored, pairs)


def prefill_redis(url: str, count: int, batch: int = 20_000) -> float:
    """Fill database 0 of ``url`` with ``count`` tokens as the Redis store keeps them (a
    Lua script per batch, bench/lua/prefill_redis.lua); return the seconds it took."""
    import redis

    from app.backends.redis.store import DIGESTS_KEY, TOKEN_KEY_PREFIX, USER_KEY_PREFIX

    started = time.monotonic()
    source = (Path(__file__).parent / "lua" / "prefill_redis.lua").read_text()
    salt, now = os.urandom(8).hex(), time.time()
    with redis.Redis.from_url(url, socket_timeout=60) as client:
        script = client.register_script(source)
        for first in range(0, count, batch):
            last = min(first + batch, count) - 1
            script(args=[salt, first, last, int(now), int(now * 1e6), TOKEN_KEY_PREFIX,
                         USER_KEY_PREFIX, DIGESTS_KEY])  # fmt: skip
    return time.monotonic() - started


def refresh_rounds(
    services: list[Server], args: argparse.Namespace, folder: Path
) -> list[paired.Pair]:
    """Run ``POST /token`` on both services at once, each round; return the pairs, the
    full store's run as the pair's ``service``, the empty store's as its ``other``."""
    scripts = {}
    for server in services:
        tokens = scenarios.log_in(server.url)
        body = json.dumps({"username": scenarios.HOLDER, "refreshToken": tokens["refreshToken"]})
        headers = {"Content-Type": scenarios.JSON}
        answer = scenarios.send(f"{server.url}/token", "POST", headers, body)
        if answer.status != 200:
            raise RuntimeError(f"{server.name}: POST /token answered {answer.status}")
        scripts[server.name] = wrk.fixed_request_script("POST", headers, body)

    def one(server: Server, seconds: int, connections: int) -> Run:
        before = server.cpu_seconds()
        result = wrk.run(
            f"{server.url}/token", scripts[server.name],
            folder / f"token-{server.listener.fileno()}.lua",
            seconds=seconds, connections=connections, threads=args.threads,
        )  # fmt: skip
        time.sleep(0.2)
        return Run(result, server.cpu_seconds() - before)

    for server in services:
        if args.warmup:
            one(server, args.warmup, args.connections)
    empty, full = services
    half = max(1, args.connections // 2)
    pairs = []
    with paired.pinned(services):
        for round_number in range(args.rounds):
            pair = paired.run_pair(
                functools.partial(one, full, args.seconds, half),
                functools.partial(one, empty, args.seconds, half),
            )
            pairs.append(pair)
            print(
                f"round {round_number + 1} POST /token, full store over empty: "
                f"{pair.ratio or 0:.2f}x statuses {pair.service.wrk.statuses} "
                f"{pair.other.wrk.statuses}",
                flush=True,
            )
    return pairs


def memory_over_logins(
    server: Server, store_path: Path, args: argparse.Namespace, folder: Path
) -> dict:
    """Read each worker's RSS after the warm-up logins, and again after ``--logins`` more."""
    workers = server.worker_pids()

    def logins(count: int) -> wrk.WrkResult:
        per_thread = -(-count // args.threads)
        result = wrk.run_until(
            f"{server.url}/login", wrk.counted_logins_script(per_thread), folder / "logins.lua",
            StoreGrowth(store_path, count),
            seconds=LOGIN_SECONDS_CAP, connections=args.connections, threads=args.threads,
        )  # fmt: skip
        print(
            f"{result.requests:,} logins in {result.seconds:.0f} s, statuses {result.statuses}",
            flush=True,
        )
        return result

    warmup = logins(args.warmup_logins)
    before = {pid: rss_of(pid) for pid in workers}
    result = logins(args.logins)
    after = {pid: rss_of(pid) for pid in workers}
    return {
        "before": before,
        "after": after,
        "warmup": warmup,
        "result": result,
        "replaced": sorted(set(workers) ^ set(server.worker_pids())),
    }


class StoreGrowth:
    """Tell when a counted-logins run is over: the store grew by ``count``, or stopped growing.

    wrk's threads stop sending after their share of responses, but wrk itself waits
    out its duration; a login that failed (no row) would leave the count short forever.
    """

    def __init__(self, store_path: Path, count: int, stall_seconds: float = 5) -> None:
        self.store_path = store_path
        self.last = stored_tokens(store_path)
        self.target = self.last + count
        self.stall_seconds = stall_seconds
        self.grew_at = time.monotonic()

    def __call__(self) -> bool:
        now = stored_tokens(self.store_path)
        if now != self.last:
            self.last, self.grew_at = now, time.monotonic()
        return now >= self.target or time.monotonic() - self.grew_at > self.stall_seconds


def rss_of(pid: int) -> int | None:
    try:
        return servers.procstat.rss_kib(pid)
    except (OSError, ValueError):
        return None  # the worker is gone


def render(
    args: argparse.Namespace,
    settings: dict[str, str],
    results: list[StoreScale],
    memory: dict,
) -> tuple[int, str]:
    """Return the exit status and the Markdown report of the scale checks."""
    lines = [
        "# Benchmark (scale mode)",
        "",
        f"- stores: {args.stored_tokens:,} refresh tokens put in each full store, as the "
        "store keeps them (SQLite: the service's file; Redis: database 0 of a redis-server "
        f"of the run's own, {' '.join(store_servers.REDIS_DURABLE)}, the empty store in "
        f"database 1); /token: {args.rounds} round(s) x {args.seconds} s, the service on "
        "both stores at once on one CPU (paired), each with half the connections; the ratio "
        "is the median of the rounds'",
        f"- gunicorn (service's gunicorn.conf.py): workers={settings['workers']}, "
        f"worker_class={settings['worker_class']}; wrk: {args.threads} thread(s), "
        f"{args.connections} connections; loopback",
        *report.machine_description(),
        "",
        "## POST /token on an empty and on a full store",
        "",
        "| store | tokens stored | filled in | CPU µs/req | req/s | p50 ms | p99 ms | statuses |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    problems, targets = [], []
    for result in results:
        summaries = {
            "empty": report.summarize([pair.other for pair in result.pairs], 200),
            "full": report.summarize([pair.service for pair in result.pairs], 200),
        }
        for name, summary in summaries.items():
            stored = f"{result.stored:,}" if name == "full" else "-"
            filled = f"{result.fill_seconds:.0f} s" if name == "full" else "-"
            lines.append(
                f"| {result.name}, {name} | {stored} | {filled} | {summary.cpu_us or 0:.0f} "
                f"| {summary.requests_per_second:.0f} | {summary.p50_ms:.2f} "
                f"| {summary.p99_ms:.2f} "
                f"| {', '.join(f'{s} ({n})' for s, n in sorted(summary.statuses.items()))} |"
            )
            if not summary.ok:
                problems.append(f"POST /token ({result.name}, {name} store)")
        pair = paired.summarize(result.pairs, 200, 200)
        spread = (
            ""
            if pair.lowest is None or pair.highest is None
            else f" ({pair.lowest:.2f} - {pair.highest:.2f})"
        )
        targets.append(
            f"| {result.name}: /token CPU/request, full store vs empty | "
            f"{'n/a' if pair.ratio is None else f'{pair.ratio:.2f}x'}{spread} "
            f"| <= {FULL_STORE_LIMIT:.2f}x "
            f"| {verdict(pair.ratio is not None and round(pair.ratio, 2) <= FULL_STORE_LIMIT)} |"
        )
    result_run: wrk.WrkResult = memory["result"]
    lines += [
        "",
        f"## Workers' RSS over {result_run.requests:,} logins (after {args.warmup_logins:,}), "
        "SQLite",
        "",
        f"{result_run.requests:,} logins in {result_run.seconds:.0f} s "
        f"({result_run.requests_per_second:.0f}/s), statuses "
        f"{', '.join(f'{s} ({n})' for s, n in sorted(result_run.statuses.items()))}; "
        f"workers replaced during them: {memory['replaced'] or 'none'}",
        "",
        "| worker PID | VmRSS before (KiB) | VmRSS after (KiB) | change |",
        "|---|---:|---:|---:|",
    ]
    changes = []
    for pid, before in memory["before"].items():
        after = memory["after"].get(pid)
        change = None if before is None or after is None else after / before - 1
        changes.append(change)
        shown = "gone" if change is None else f"{change:+.1%}"
        lines.append(f"| {pid} | {before} | {after} | {shown} |")
    memory_met = (
        bool(changes)
        and all(change is not None and abs(change) <= RSS_LIMIT for change in changes)
        and result_run.requests >= args.logins
        and not memory["replaced"]
    )
    for what, run in (("warm-up logins", memory["warmup"]), ("logins", result_run)):
        wrong = {status: n for status, n in run.statuses.items() if status != 200}
        if wrong or run.socket_error_count or sum(run.statuses.values()) < run.requests:
            problems.append(f"{what}: statuses {run.statuses}, socket errors {run.socket_errors}")
    lines += [
        "",
        "## Targets",
        "",
        "| target | measured (lowest - highest) | limit | verdict |",
        "|---|---|---|---|",
        *targets,
        f"| each worker's RSS over {args.logins:,} logins | "
        f"{', '.join('gone' if c is None else f'{c:+.1%}' for c in changes)} "
        f"| ±{RSS_LIMIT:.0%}, no worker replaced, every login done | {verdict(memory_met)} |",
    ]
    if problems:
        lines += ["", f"**Unexpected statuses or socket errors: {'; '.join(problems)}**"]
    return (1 if problems else 0), "\n".join(lines)


def verdict(met: bool) -> str:
    return "met" if met else "**missed**"
