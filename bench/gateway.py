"""The whole protected path: nginx in front of an upstream, with and without the gateway.

    make bench-gateway   # .venv/bin/python -m bench.gateway: 3 rounds x 5 s per path

nginx (the shipped token-service.conf and gateway snippets) serves three paths to the
same upstream, a gunicorn answering a constant JSON (bench/floor_app.py under the
service's worker settings):

- ``straight``: nginx proxies to the upstream, no check;
- ``gateway``: ``auth_request`` to the service's ``GET /auth/check`` (gunicorn as
  ``make run`` starts it) before the upstream, the identity headers passed on;
- ``cached``: the same through a second nginx, before a second service that lets nginx
  keep each verdict (``AUTH_CHECK_CACHE_SECONDS=5``, the snippets' verdict cache).

wrk sends one valid token again and again, the paths taking turns round by round; the
report gives each path's req/s, p50 and p99 (medians over rounds) and its req/s against
``straight``. Everything runs on loopback, on the cores wrk uses too: compare ratios.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench import report, scenarios, servers, wrk
from bench.servers import Server
from bench.wrk import WrkResult

DEPLOY = servers.ROOT / "deploy" / "nginx"
PATHS = ("straight", "gateway", "cached")
UPSTREAM_ANSWER = {"status": 200, "headers": [["Content-Type", "application/json"]],
                   "body": '{"message":"hello"}\n'}  # fmt: skip
SITE = """
upstream bench_upstream {{
    server 127.0.0.1:{upstream_port};
    keepalive 16;
}}
proxy_cache_path {folder}/verdicts levels=1:2 use_temp_path=off
                 keys_zone=token_service_verdicts:1m max_size=16m inactive=60s;
server {{
    listen 127.0.0.1:{port};
    access_log off;
    include {deploy}/gateway-check.conf;
    proxy_http_version 1.1;
    proxy_set_header Connection "";

    location = /straight {{
        proxy_pass http://bench_upstream/app;
    }}
    location = /gateway {{
        auth_request /_token_service/check;
        include {deploy}/gateway-identity.conf;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_pass http://bench_upstream/app;
    }}
}}
"""
#: Seconds the service lets nginx keep a verdict, for the ``cached`` path.
CACHE_SECONDS = "5"


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway", description=__doc__)
    parser.add_argument("--seconds", type=int, default=5, help="length of one wrk run (5)")
    parser.add_argument("--rounds", type=int, default=3, help="runs per path (3)")
    parser.add_argument("--connections", type=int, default=16, help="wrk connections (16)")
    args = parser.parse_args(argv)
    if min(args.seconds, args.rounds, args.connections) < 1:
        parser.error("--seconds, --rounds and --connections must be at least 1")
    return args


def start_nginx(
    folder: Path, service_port: int, upstream_port: int
) -> tuple[subprocess.Popen, str]:
    """Start nginx with token-service.conf and the bench's site; return it and its URL."""
    binary = shutil.which("nginx", path="/usr/sbin:/usr/bin:/sbin")
    if binary is None:
        raise RuntimeError("nginx is needed: apt-get install nginx")
    folder.mkdir()
    port, unused = free_port(), free_port()
    service_site = (DEPLOY / "token-service.conf").read_text()
    for old, new in [
        ("listen 80;", f"listen 127.0.0.1:{unused};"),
        ("server 127.0.0.1:8080;", f"server 127.0.0.1:{service_port};"),
        ("/var/log/nginx/token-service.access.log", str(folder / "service-access.log")),
    ]:
        service_site = service_site.replace(old, new)
    site = SITE.format(folder=folder, port=port, upstream_port=upstream_port, deploy=DEPLOY)
    temp = "\n".join(f"{kind}_temp_path {folder}/{kind};" for kind in ("client_body", "proxy"))
    (folder / "nginx.conf").write_text(
        f"daemon off;\nworker_processes 1;\npid {folder}/nginx.pid;\n"
        f"error_log {folder}/error.log warn;\nevents {{ worker_connections 1024; }}\n"
        f"http {{\n{temp}\naccess_log off;\n{service_site}\n{site}\n}}\n"
    )
    error_log = folder / "error.log"
    process = subprocess.Popen(
        [binary, "-p", str(folder), "-c", str(folder / "nginx.conf"), "-e", str(error_log)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 15
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"nginx exited: {error_log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(f"{url}/straight", timeout=2).close()
            return process, url
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError("nginx did not answer in time") from None
            time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def port_of(server: Server) -> int:
    return server.listener.getsockname()[1]


def measure(
    urls: dict[str, str], tokens: dict[str, str], args: argparse.Namespace, folder: Path
) -> dict[str, list[WrkResult]]:
    """Run wrk on each path in turn, ``args.rounds`` times, after a second of warm-up each."""
    runs: dict[str, list[WrkResult]] = {path: [] for path in PATHS}

    def run(path: str, seconds: int) -> WrkResult:
        script = wrk.fixed_request_script("GET", {"Authorization": f"Bearer {tokens[path]}"}, None)
        return wrk.run(
            urls[path], script, folder / "gateway.lua",
            seconds=seconds, connections=args.connections, threads=1,
        )  # fmt: skip

    for path in PATHS:
        run(path, 1)
    for round_number in range(args.rounds):
        shift = round_number % len(PATHS)
        for path in PATHS[shift:] + PATHS[:shift]:
            result = run(path, args.seconds)
            runs[path].append(result)
            print(
                f"round {round_number + 1} {path:9} {result.requests_per_second:7.0f} req/s "
                f"p99 {result.p99_ms:6.2f} ms statuses {result.statuses}",
                file=sys.stderr, flush=True,
            )  # fmt: skip
    return runs


def render(runs: dict[str, list[WrkResult]], args: argparse.Namespace) -> str:
    """Return the Markdown report: how it was measured, the machine, the table."""
    return "\n".join(
        [
            "# The protected path through nginx (bench/gateway.py)",
            "",
            f"- wrk: 1 thread, {args.connections} connections, {args.rounds} round(s) x "
            f"{args.seconds} s per path, the paths taking turns; loopback, the servers' cores",
            f"- cached: the service with AUTH_CHECK_CACHE_SECONDS={CACHE_SECONDS}",
            *report.machine_description(),
            "",
            table(runs),
        ]
    )


def table(runs: dict[str, list[WrkResult]]) -> str:
    """Return the Markdown table: medians per path, and req/s against ``straight``."""
    lines = [
        "| path | req/s | vs straight | p50 ms | p99 ms | statuses |",
        "|---|---:|---:|---:|---:|---|",
    ]
    straight = statistics.median(r.requests_per_second for r in runs["straight"])
    for path, results in runs.items():
        rps = statistics.median(r.requests_per_second for r in results)
        p50 = statistics.median(r.p50_ms for r in results)
        p99 = statistics.median(r.p99_ms for r in results)
        statuses: dict[int, int] = {}
        for result in results:
            for status, count in result.statuses.items():
                statuses[status] = statuses.get(status, 0) + count
        shown = ", ".join(f"{status} ({count})" for status, count in sorted(statuses.items()))
        lines.append(
            f"| {path} | {rps:.0f} | {rps / straight:.2f}x | {p50:.2f} | {p99:.2f} | {shown} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    if shutil.which("wrk") is None:
        print("wrk is needed: apt-get install wrk", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as temporary:
        folder = Path(temporary)
        folder.chmod(0o755)  # nginx's workers (nobody, under root) reach the verdict cache
        service_env = servers.service_environment(folder / "instance")
        settings = servers.service_gunicorn_settings(service_env)
        workers = int(settings["workers"])
        answers = folder / "upstream.json"
        answers.write_text(json.dumps({"GET /app": UPSTREAM_ANSWER}))
        upstream_env = {**servers.base_environment(), "FLOOR_ANSWERS": str(answers)}
        cached_env = servers.service_environment(folder / "cached-instance")
        cached_env["AUTH_CHECK_CACHE_SECONDS"] = CACHE_SECONDS
        started = [
            servers.service(service_env, folder / "service.log"),
            servers.service(cached_env, folder / "cached-service.log"),
            servers.plain_app(
                "upstream", "floor_app:app", settings, upstream_env, folder / "upstream.log"
            ),
        ]
        service, cached_service, upstream = started
        proxies: list[subprocess.Popen] = []
        try:
            for server in started:
                server.start()
            for server in started:
                server.wait_ready(workers)
            nginx, url = start_nginx(folder / "nginx", port_of(service), port_of(upstream))
            proxies.append(nginx)
            nginx, cached_url = start_nginx(
                folder / "cached-nginx", port_of(cached_service), port_of(upstream)
            )
            proxies.append(nginx)
            urls = {"straight": f"{url}/straight", "gateway": f"{url}/gateway",
                    "cached": f"{cached_url}/gateway"}  # fmt: skip
            token = scenarios.log_in(service.url)["accessToken"]
            tokens = {"straight": token, "gateway": token,
                      "cached": scenarios.log_in(cached_service.url)["accessToken"]}  # fmt: skip
            runs = measure(urls, tokens, args, folder)
        except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as error:
            print(f"bench: cannot run: {error}", file=sys.stderr)
            return 2
        finally:
            for proxy in proxies:
                proxy.terminate()  # by its PID
                proxy.wait(10)
            servers.stop_all(started)
    print(render(runs, args))
    wrong = [
        path
        for path, results in runs.items()
        for result in results
        if result.socket_error_count or set(result.statuses) != {200}
    ]
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
