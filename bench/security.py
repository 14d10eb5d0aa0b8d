"""In-process cost of the hardening on the request path: µs per call (argon2 in ms).

    .venv/bin/python bench/security.py [--rounds 7] [--redis-url redis://127.0.0.1:6379/0]

Rows:

- ``rate limit check``: ``RateLimiter.check`` for a counted address (every limit of
  RATE_LIMIT_AUTH's default is hit: one counter each), and for an exempt one; on the
  SQLite file (a temporary folder) and, with ``--redis-url``, on that Redis.
- ``POST /login`` and ``POST /token``: the whole WSGI call of the app (request log
  included), RATE_LIMIT_AUTH off, then on for a counted address.
- ``GET /healthz``: the whole WSGI call without the nosniff header, with it added by the
  security-headers middleware (what the service does), and with it added by an
  ``after_request`` function instead.
- ``argon2id verify``: one password check of USERS_FILE (``app.auth.users.HASHER``).

Each figure is the process's CPU time per call, the best of ``--rounds`` rounds (the
least disturbed by other work), the variants of a row's group taking turns round by
round so that the machine's load weighs on each alike.
"""

from __future__ import annotations

import argparse
import io
import os
import secrets
import statistics
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flask import Flask
from werkzeug.test import EnvironBuilder

from app import create_app
from app.auth.users import HASHER
from app.backends.counters_storage import open_storage
from app.http.request_log import SECURITY_HEADERS, RequestLog
from app.limits.address import RateLimiter

CALLS = 2000
COUNTED, EXEMPT = "203.0.113.7", "127.0.0.1"
#: The default's two windows, with room for every call of a run.
NEVER_REACHED = "1000000 per second; 1000000 per minute"


def best_microseconds(call: Callable[[], object], rounds: int, calls: int = CALLS) -> float:
    """Return the best of ``rounds`` rounds of ``calls`` calls, in CPU µs per call."""
    return (
        min(timeit.repeat(call, number=calls, repeat=rounds, timer=time.process_time)) / calls * 1e6
    )


def interleaved(
    calls: dict[str, Callable[[], object]], rounds: int, number: int = CALLS
) -> list[tuple[str, float]]:
    """Return the best CPU µs per call of each of ``calls``, their rounds taking turns."""
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(rounds):
        for name, call in calls.items():
            timing = timeit.Timer(call, timer=time.process_time).timeit(number) / number * 1e6
            best[name] = min(best[name], timing)
    return list(best.items())


def wsgi_call(app: Flask, method: str, path: str, address: str, **options: Any) -> Callable:
    """Return a call of ``app``'s WSGI entry with one request, its body read whole."""
    builder = EnvironBuilder(path=path, method=method, **options)
    environ = builder.get_environ()
    environ["REMOTE_ADDR"] = address
    body = environ["wsgi.input"].read()

    def start_response(status: str, headers: list, exc_info: Any = None) -> None:
        return None

    def call() -> None:
        request = dict(environ)
        request["wsgi.input"] = io.BytesIO(body)
        for _ in app.wsgi_app(request, start_response):
            pass

    return call


def middleware(app: Flask, kind: type) -> Any:
    """Return the middleware of class ``kind`` around ``app``'s Flask entry."""
    layer: Any = app.wsgi_app
    while not isinstance(layer, kind):
        layer = layer.app
    return layer


def quiet(app: Flask) -> Flask:
    """Send the request log to /dev/null: the terminal is not what is measured."""
    log = app.wsgi_app
    while not hasattr(log, "fd"):
        log = log.app
    log.fd = os.open(os.devnull, os.O_WRONLY)  # a bare descriptor: open for the process
    return app


def app_with(folder: str, store_url: str | None, **settings: str) -> Flask:
    overrides = {"SIGNING_SECRET": secrets.token_urlsafe(48), "INSTANCE_PATH": folder, **settings}
    if store_url:
        overrides["TOKEN_STORE_URL"] = store_url
    return quiet(create_app(overrides))


def measure_limiter(store: str, store_url: str | None, rounds: int) -> list[tuple[str, float]]:
    with tempfile.TemporaryDirectory() as folder:
        settings = app_with(folder, store_url).config["SETTINGS"]
        big = app_with(folder, store_url, RATE_LIMIT_AUTH=NEVER_REACHED).config["SETTINGS"]
        limiter = RateLimiter(
            big.rate_limit_auth, settings.rate_limit_exempt, open_storage(settings)
        )
        limiter.check("login", COUNTED)
        rows = interleaved(
            {
                f"rate limit check, {store}, counted address": lambda: limiter.check(
                    "login", COUNTED
                ),
                f"rate limit check, {store}, exempt address": lambda: limiter.check(
                    "login", EXEMPT
                ),
            },
            rounds,
        )
        off = app_with(folder, store_url, RATE_LIMIT_AUTH="off")
        on = app_with(folder, store_url, RATE_LIMIT_AUTH=NEVER_REACHED)
        token = off.test_client().post("/login", json={"username": "a"}).get_json()["refreshToken"]
        refresh = {"username": "a", "refreshToken": token}
        calls = {}
        for name, app in [("off", off), ("on", on)]:
            calls[f"POST /login, {store}, limit {name}"] = wsgi_call(
                app, "POST", "/login", COUNTED, json={"username": "alice"}
            )
        for name, app in [("off", off), ("on", on)]:
            calls[f"POST /token, {store}, limit {name}"] = wsgi_call(
                app, "POST", "/token", COUNTED, json=refresh
            )
        return rows + interleaved(calls, rounds, number=CALLS // 4)


def measure_nosniff(rounds: int) -> list[tuple[str, float]]:
    def nosniff(response: Any) -> Any:
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    with tempfile.TemporaryDirectory() as folder:
        apps = {name: app_with(folder, None) for name in ("none", "middleware", "after_request")}
        middleware(apps["none"], RequestLog).headers = ()
        middleware(apps["after_request"], RequestLog).headers = ()
        apps["after_request"].after_request(nosniff)
        assert middleware(apps["middleware"], RequestLog).headers == SECURITY_HEADERS
        return interleaved(
            {
                "GET /healthz, no nosniff header": wsgi_call(
                    apps["none"], "GET", "/healthz", EXEMPT
                ),
                "GET /healthz, nosniff in its own middleware": wsgi_call(
                    apps["middleware"], "GET", "/healthz", EXEMPT
                ),
                "GET /healthz, nosniff in an after_request": wsgi_call(
                    apps["after_request"], "GET", "/healthz", EXEMPT
                ),
            },
            rounds,
        )


def measure_argon2(rounds: int) -> list[tuple[str, float]]:
    hashed = HASHER.hash("a password of ours")
    walls, cpus = [], []
    for _ in range(max(rounds, 9)):
        wall, cpu = time.perf_counter(), time.process_time()
        HASHER.verify(hashed, "a password of ours")
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return [
        ("argon2id verify, ms, best wall", min(walls) * 1e3),
        ("argon2id verify, ms, median wall", statistics.median(walls) * 1e3),
        ("argon2id verify, ms, median CPU", statistics.median(cpus) * 1e3),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--redis-url", help="also measure on this Redis (it is written to)")
    options = parser.parse_args()
    rows = measure_limiter("SQLite", None, options.rounds)
    if options.redis_url:
        rows += measure_limiter("Redis", options.redis_url, options.rounds)
    rows += measure_nosniff(options.rounds)
    rows += measure_argon2(options.rounds)
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value:8.1f}")


if __name__ == "__main__":
    main()
