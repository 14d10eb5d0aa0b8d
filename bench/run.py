"""Benchmark: wrk against the service under gunicorn, beside a bare-Flask floor, same run.

    make bench                      # or: .venv/bin/python bench/run.py --seconds 5 --rounds 3

Every scenario runs ``--rounds`` times, interleaved with the others so that machine
noise hits them alike; the report gives the median requests per second, the median
of the p50 and p99 latencies, and each scenario's ratio to the floor. Only loopback
addresses are used, and every wrk run is bounded by ``--seconds``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LUA = {
    "post_json": """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = os.getenv("BENCH_BODY")
""",
    "get_bearer": """
wrk.headers["Authorization"] = "Bearer " .. os.getenv("BENCH_TOKEN")
""",
    "get": "",
    # one token after another from a file: more distinct tokens than the verified-token
    # cache holds, so every request pays PyJWT's full verification
    "get_many_bearers": """
local tokens, next_index = {}, 1
for line in io.lines(os.getenv("BENCH_TOKEN_FILE")) do tokens[#tokens + 1] = line end
request = function()
    next_index = next_index % #tokens + 1
    return wrk.format(nil, nil, {["Authorization"] = "Bearer " .. tokens[next_index]})
end
""",
}
#: Distinct tokens of the cache-missing scenario: above VERIFIED_TOKEN_CACHE_SIZE (1024).
MANY_TOKENS = 3000


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_gunicorn(app: str, env: dict[str, str], workers: int, chdir: Path) -> tuple:
    port = free_port()
    command = [
        sys.executable, "-m", "gunicorn", "-c", str(ROOT / "gunicorn.conf.py"),
        "-b", f"127.0.0.1:{port}", "-w", str(workers), "--access-logfile", "/dev/null",
        "--chdir", str(chdir), app,
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/floor" if "floor" in app else f"{url}/healthz")
            return process, url
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"{app} did not start")


def post_json(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request) as response:
        return json.load(response)


def run_wrk(url: str, script: str, env: dict[str, str], args: argparse.Namespace) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as handle:
        handle.write(LUA[script])
    try:
        output = subprocess.run(
            [
                "wrk", "--latency", "-t", "2", "-c", str(args.connections),
                "-d", f"{args.seconds}s", "--timeout", "5s", "-s", handle.name, url,
            ],
            env={**os.environ, **env}, capture_output=True, text=True,
            timeout=args.seconds + 30, check=True,
        ).stdout  # fmt: skip
    finally:
        os.unlink(handle.name)
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    errors = re.search(r"Socket errors: (.*)", output)
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1)),
        "p50": latency(output, "50%"),
        "p99": latency(output, "99%"),
        "non_2xx": int(non_2xx.group(1)) if non_2xx else 0,
        "socket_errors": errors.group(1) if errors else "",
    }


def latency(output: str, percentile: str) -> float:
    value, unit = re.search(rf"{percentile}\s+([\d.]+)(us|ms|s)", output).groups()
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=5, help="length of one wrk run")
    parser.add_argument("--rounds", type=int, default=3, help="runs per scenario")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is needed: apt-get install wrk")

    with tempfile.TemporaryDirectory() as instance:
        env = {
            "PATH": os.environ["PATH"],
            "SIGNING_SECRET": secrets.token_urlsafe(48),
            "INSTANCE_PATH": instance,
            "LOG_LEVEL": "WARNING",
            "ACCESS_TOKEN_LIFETIME": "3600",
        }
        service, service_url = start_gunicorn("wsgi:app", env, args.workers, ROOT)
        floor, floor_url = start_gunicorn("floor_app:app", env, args.workers, ROOT / "bench")
        try:
            tokens = post_json(f"{service_url}/login", {"username": "alice"})
            token_file = Path(instance) / "tokens.txt"
            token_file.write_text(
                "\n".join(
                    post_json(f"{service_url}/login", {"username": f"u{n}"})["accessToken"]
                    for n in range(MANY_TOKENS)
                )
            )
            scenarios = {
                "floor: bare Flask GET": (f"{floor_url}/floor", "get", {}),
                "GET /user-accessible": (
                    f"{service_url}/user-accessible", "get_bearer",
                    {"BENCH_TOKEN": tokens["accessToken"]},
                ),
                f"GET /user-accessible, {MANY_TOKENS} tokens": (
                    f"{service_url}/user-accessible", "get_many_bearers",
                    {"BENCH_TOKEN_FILE": str(token_file)},
                ),
                "POST /token (refresh)": (
                    f"{service_url}/token", "post_json",
                    {"BENCH_BODY": json.dumps(
                        {"username": "alice", "refreshToken": tokens["refreshToken"]}
                    )},
                ),
                "POST /login (store write)": (
                    f"{service_url}/login", "post_json",
                    {"BENCH_BODY": json.dumps({"username": "bench", "password": "x"})},
                ),
            }  # fmt: skip
            results: dict[str, list[dict]] = {name: [] for name in scenarios}
            for _ in range(args.rounds):
                for name, (url, script, extra) in scenarios.items():
                    results[name].append(run_wrk(url, script, extra, args))
        finally:
            for process in (service, floor):
                process.send_signal(signal.SIGTERM)
                process.wait(20)

    floor_rps = statistics.median(run["rps"] for run in results["floor: bare Flask GET"])
    print(
        f"\n{args.workers} sync workers, {args.connections} connections, "
        f"{args.rounds} x {args.seconds}s per scenario, medians:\n"
    )
    print(f"{'scenario':36} {'req/s':>9} {'vs floor':>9} {'p50 ms':>8} {'p99 ms':>8}  failures")
    for name, runs in results.items():
        rps = statistics.median(run["rps"] for run in runs)
        failures = sum(run["non_2xx"] for run in runs)
        print(
            f"{name:36} {rps:9.0f} {rps / floor_rps:9.2f} "
            f"{statistics.median(run['p50'] for run in runs):8.2f} "
            f"{statistics.median(run['p99'] for run in runs):8.2f}  "
            f"{failures} non-2xx {' '.join(run['socket_errors'] for run in runs).strip()}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
