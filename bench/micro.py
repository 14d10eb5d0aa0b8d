"""In process: the CPU a request costs the service's WSGI app, and what a setting adds to it.

    .venv/bin/python -m bench.micro [--rounds 9] [--calls 1000] [--only a,b] \\
        [SETTING=VALUE ...] [--versus SETTING=VALUE ...]

Each request of bench/scenarios.py (a to i and s) goes through the app's whole WSGI entry
(``create_app``: the request log, written to /dev/null, and the metrics included), ``--calls``
times a round; the figure is the best round's CPU µs per call, the least disturbed by the
machine's other work. With ``--versus``, a second app built with those settings takes turns
with the first, round by round, and the ratio is shown: what a setting costs
(``SIGNING_ALGORITHM=EdDSA``, ``RATE_LIMIT_EXEMPT=`` to count the address, ``METRICS=off``).
No server, no network: a request's own cost, without gunicorn, the kernel or the client.
The app is set up as the bench's service is: a CLIENTS_FILE of one client, the holder
logged in ``HOLDER_SESSIONS`` times; each request is checked once for its status first.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from werkzeug.test import EnvironBuilder

from app import create_app
from bench import clients
from bench.scenarios import HOLDER, HOLDER_SESSIONS, REQUESTS, Request


def wsgi_call(app: Any, request: Request, held: clients.Credentials, tokens: list[str]) -> Callable:
    """Return a call of the WSGI entry ``app`` with ``request`` (a*: the next of ``tokens``)."""
    headers, body = clients.request_parts(request, held)
    environ = EnvironBuilder(request.path, method=request.method, headers=headers,
                             data=body).get_environ()  # fmt: skip
    environ["REMOTE_ADDR"] = "127.0.0.1"
    data = environ["wsgi.input"].read()
    turn = [0]
    answered = []
    for _ in app(dict(environ, **{"wsgi.input": io.BytesIO(data)}),
                 lambda status, headers, exc_info=None: answered.append(status)):  # fmt: skip
        pass
    if int(answered[0][:3]) != request.status:
        raise RuntimeError(f"{request.key} ({request.title}) answered {answered[0]}")

    def call() -> None:
        current = dict(environ, **{"wsgi.input": io.BytesIO(data)})
        if request.bearer == "many":
            turn[0] = (turn[0] + 1) % len(tokens)
            current["HTTP_AUTHORIZATION"] = f"Bearer {tokens[turn[0]]}"
        for _ in app(current, lambda status, headers, exc_info=None: None):
            pass

    return call


def prepared(settings: dict[str, str], folder: str, distinct: int) -> tuple[Any, Any, list]:
    """Return an app with ``settings``, the holder's tokens, and ``distinct`` users' tokens."""
    clients_file = Path(folder) / "clients.json"
    authorization = clients.register_client(clients_file)
    overrides = {"INSTANCE_PATH": folder, "SIGNING_SECRET": secrets.token_urlsafe(48),
                 "CLIENTS_FILE": str(clients_file)}  # fmt: skip
    overrides |= {"ACCESS_TOKEN_LIFETIME": "86400", "RATE_LIMIT_AUTH": "off", **settings}
    app = create_app(overrides)
    client = app.test_client()

    def log_in(name: str) -> dict[str, str]:
        return client.post("/login", json={"username": name, "password": "x"}).get_json()

    for _ in range(HOLDER_SESSIONS):
        tokens = log_in(HOLDER)
    many = Path(folder) / "many.txt"
    many.write_text(tokens["accessToken"] + "\n")
    held = clients.Credentials(tokens["accessToken"], tokens["refreshToken"],
                               clients.forge_signature(tokens["accessToken"]), many,
                               authorization)  # fmt: skip
    return app.wsgi_app, held, [log_in(f"user{n}")["accessToken"] for n in range(distinct)]


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """Send file descriptor 1 (the request log) to /dev/null meanwhile."""
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)


def parse_settings(pairs: list[str]) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in pairs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.micro", description=__doc__)
    parser.add_argument("settings", nargs="*", help="SETTING=VALUE of the app measured")
    parser.add_argument("--versus", nargs="*", default=None, help="SETTING=VALUE of the other")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--distinct-tokens", type=int, default=3000)
    parser.add_argument("--only", default=",".join(key for key in REQUESTS if key != "p"))
    args = parser.parse_args(argv)
    variants = {"app": parse_settings(args.settings)}
    if args.versus is not None:
        variants["versus"] = parse_settings(args.versus)
    best: dict[tuple[str, str], float] = {}
    with contextlib.ExitStack() as stack:
        calls = {}
        with quiet_stdout():
            for name, settings in variants.items():
                folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-micro-"))
                app, held, tokens = prepared(settings, folder, args.distinct_tokens)
                for key in args.only.split(","):
                    calls[(key, name)] = wsgi_call(app, REQUESTS[key], held, tokens)
            for _ in range(args.rounds):  # the variants take turns, round by round
                for what, call in calls.items():
                    started = time.process_time()
                    for _ in range(args.calls):
                        call()
                    cost = (time.process_time() - started) / args.calls * 1e6
                    best[what] = min(best.get(what, cost), cost)
    for key in args.only.split(","):
        line = f"{key:3} {REQUESTS[key].title:45} {best[(key, 'app')]:8.1f} µs"
        if "versus" in variants:
            versus = best[(key, "versus")]
            line += f"  versus {versus:8.1f} µs  ratio {best[(key, 'app')] / versus:.3f}"
        print(line)


if __name__ == "__main__":
    main()
