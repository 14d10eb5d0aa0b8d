"""Scale mode on PostgreSQL: ``POST /token`` on a database of many refresh tokens vs an empty one.

As bench/scale.py does for SQLite: two services side by side, one on an empty database,
one on a database prefilled with ``--stored-tokens`` refresh tokens, both of one
PostgreSQL server of the run's own (a cluster in a temporary folder, PostgreSQL's
durable defaults); in each round both take ``POST /token`` at once, each service on a
CPU of its own (paired). Reported: each service's CPU per request, and the database's
(its backends for that service's database), full over empty, the median of the rounds.

    .venv/bin/python -m bench.scale_postgres --stored-tokens 100000
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench import paired, report, scale, servers
from tests.helpers.postgres_server import PostgresServer

RESULTS = servers.BENCH / "results"
#: Highest CPU per /token request on the full database, as a multiple of the empty one's.
FULL_STORE_LIMIT = 1.05


def prefill(url: str, count: int, batch: int = 100_000) -> float:
    """Put ``count`` refresh tokens in the store's table (made by the store); return seconds."""
    import psycopg

    from app.backends import backend_at
    from app.backends.interface import token_digest

    backend_at(url, timeout=30).store.ping()  # the schema, as the service makes it
    started = time.monotonic()
    salt, issued_at = os.urandom(16).hex(), int(time.time())
    with psycopg.connect(url) as connection, connection.cursor() as cursor:
        for start in range(0, count, batch):
            with cursor.copy(
                "COPY refresh_tokens (digest, username, issued_at) FROM STDIN"
            ) as copy:
                for number in range(start, min(start + batch, count)):
                    copy.write_row(
                        (token_digest(f"{salt}-{number}"), f"user{number // 4}", issued_at)
                    )
        connection.commit()
        connection.autocommit = True
        connection.execute("VACUUM ANALYZE refresh_tokens")
    return time.monotonic() - started


def backend_cpu(database: PostgresServer, name: str) -> float:
    """Return the CPU seconds the server's backends for database ``name`` have used."""
    with database.admin() as admin:
        pids = [pid for (pid,) in admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (name,)
        )]  # fmt: skip
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def run(args: argparse.Namespace) -> str:
    """Run the paired rounds; return the Markdown report."""
    database = PostgresServer().start()
    urls = {name: database.create_database(name) for name in ("empty", "full")}
    try:
        print(f"filling a database with {args.stored_tokens:,} refresh tokens ...", flush=True)
        fill_seconds = prefill(urls["full"], args.stored_tokens)
        with tempfile.TemporaryDirectory(prefix="bench-scale-pg-") as temporary:
            folder = Path(temporary)
            started = []
            try:
                for name, url in urls.items():
                    instance = folder / name
                    instance.mkdir(mode=0o700)
                    env = {**servers.service_environment(instance), "TOKEN_STORE_URL": url}
                    server = servers.service(env, folder / f"{name}.log")
                    server.name = f"service, {name} database"
                    started.append(server.start())
                settings = servers.service_gunicorn_settings(env)
                for server in started:
                    server.wait_ready(int(settings["workers"]))
                before = {name: backend_cpu(database, name) for name in urls}
                pairs = scale.refresh_rounds(started, args, folder)
                database_cpu = {name: backend_cpu(database, name) - before[name] for name in urls}
            finally:
                servers.stop_all(started)
    finally:
        database.remove()
    return render(args, fill_seconds, pairs, database_cpu)


def render(
    args: argparse.Namespace, fill_seconds: float, pairs: list[paired.Pair], database_cpu: dict
) -> str:
    summaries = {
        "empty database": report.summarize([pair.other for pair in pairs], 200),
        "full database": report.summarize([pair.service for pair in pairs], 200),
    }
    ratios = [pair.ratio for pair in pairs if pair.ratio]
    requests = {
        "empty database": sum(p.other.wrk.statuses.get(200, 0) for p in pairs),
        "full database": sum(p.service.wrk.statuses.get(200, 0) for p in pairs),
    }
    lines = [
        "# Benchmark (scale mode, PostgreSQL)",
        "",
        f"- store: {args.stored_tokens:,} refresh tokens put in one database in "
        f"{fill_seconds:.0f} s, another empty, one PostgreSQL server (fsync on); /token: "
        f"{args.rounds} round(s) x {args.seconds} s, both services at once, each on a CPU "
        "(paired); the ratio is the median of the rounds'",
        *report.machine_description(),
        "",
        "| store | service CPU µs/req | database CPU µs/req | req/s | p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    database_us = {}
    for name, summary in summaries.items():
        key = name.split()[0]
        database_us[name] = database_cpu[key] / max(1, requests[name]) * 1e6
        lines.append(
            f"| {name} | {summary.cpu_us or 0:.0f} | {database_us[name]:.0f} "
            f"| {summary.requests_per_second:.0f} | {summary.p50_ms:.2f} | {summary.p99_ms:.2f} |"
        )
    ratio = statistics.median(ratios) if ratios else float("nan")
    db_ratio = database_us["full database"] / database_us["empty database"]
    lines += [
        "",
        f"Service CPU per /token, full over empty: {ratio:.2f}x (target <= {FULL_STORE_LIMIT}x:"
        f" {'met' if ratio <= FULL_STORE_LIMIT else 'NOT met'}); the database's: {db_ratio:.2f}x.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored-tokens", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", type=Path, default=RESULTS / "scale-postgres.md")
    args = parser.parse_args()
    markdown = run(args)
    args.output.write_text(markdown)
    print(markdown)


if __name__ == "__main__":
    main()
