"""The bench: its pairs and targets, the paired runner, the floor's work, and its arithmetic."""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import re
import sqlite3
import subprocess
import sys
import time

import jwt
import pytest
from werkzeug.test import Client

from bench import clients, micro, paired, report, request_line, run, scenarios, servers, wrk
from bench.paired import Pair, Run
from bench.scenarios import FLOOR, GROUPS, SERVICE, STORES, App, Case, cases
from tests.helpers.stores import open_store
from tests.helpers.tools import ROOT

WRK_OUTPUT = """\
Running 5s test @ http://127.0.0.1:41234/admin-accessible
  1 threads and 16 connections
  Latency Distribution
     50%  812.00us
     75%    6.15ms
     99%    1.20s
  7690 requests in 5.01s, 553.70KB read
  Socket errors: connect 0, read 3, write 0, timeout 2
  Non-2xx or 3xx responses: 7688
Requests/sec:   1534.52
status 403 7680
status 500 8
"""


def run_of(requests: int, cpu_seconds: float, statuses: dict[int, int], expected=200) -> Run:
    result = wrk.WrkResult(
        requests=requests, seconds=1.0, requests_per_second=float(requests), p50_ms=1.0,
        p99_ms=2.0, non_2xx=0, socket_errors={"connect": 0, "read": 0, "write": 0, "timeout": 0},
        statuses=statuses,
    )  # fmt: skip
    return Run(result, cpu_seconds, expected)


def pair(service_us: float, other_us: float, status: int = 200) -> Pair:
    return Pair(run_of(1000, service_us / 1000, {status: 1000}),
                run_of(1000, other_us / 1000, {200: 1000}))  # fmt: skip


def test_every_request_and_target_of_the_report_is_a_pair():
    everything = cases(GROUPS, STORES, 100)
    table = {(c.group, c.request, c.service, c.other, c.answered, c.target, c.below)
             for c in everything}  # fmt: skip
    floor_targets = {"a": 1.00, "a*": None, "b": 1.25, "c": 1.25, "d": 1.00, "e": 1.10,
                     "f": 1.00, "g": 0.95, "h": 1.00, "i": 1.05, "s": None}  # fmt: skip
    # the grant against the floor's login (no store write), introspection against its GET
    floor_request = {"a*": "a", "e": "a", "g": "a", "h": "b", "i": "a"}
    expected = set()
    for key, target in floor_targets.items():
        expected.add(("main", key, SERVICE, FLOOR, floor_request.get(key, key), target, False))
        if key not in "ghis":  # the peers lack the gateway's check, OAuth and sessions
            for peer in ("pyjwt", "jwt-extended"):
                expected.add(("main", key, SERVICE, App(peer), key, 1.0, True))
    for store in ("sqlite", "redis", "postgresql"):
        floor = App("floor", store, store_floor=True)
        for key in ("b", "c"):
            expected.add(("matrix", key, App("service", store), floor, key, 1.10, False))
        for key in ("c", "s"):
            expected.add(("scale", key, App("service", store, prefill=100),
                          App("service", store), key, 1.05, False))  # fmt: skip
    # each proxy with the service's check against the same proxy straight to the upstream
    straight = {
        "gateway": App("floor", proxy="nginx"),
        "caddy-gateway": App("floor", proxy="caddy"),
    }
    for service in (c.service for c in everything if c.group == "gateway"):
        assert service.proxy in straight
        assert service.kind == "service"
        expected.add(("gateway", "p", service, straight[service.proxy], "p", None, False))
    ruled = App("service", settings=(("ACCESS_RULES_FILE", "bench/access-rules-100.toml"),
                                     ("TRUSTED_PROXIES", "127.0.0.1/32"),
                                     ("OPEN_LOGIN", "true")))  # fmt: skip
    for key, service in (("g", SERVICE), ("r", ruled), ("v", SERVICE)):
        expected.add(("rules", key, service, FLOOR, "a", 1.00, False))
    assert table == expected
    gateways = [(c.service.proxy, dict(c.service.settings)) for c in everything
                if c.group == "gateway"]  # fmt: skip
    behind = {"TRUSTED_PROXIES": "127.0.0.1/32", "OPEN_LOGIN": "true"}
    cached = {**behind, "AUTH_CHECK_CACHE_SECONDS": "5"}
    assert gateways == [("gateway", behind), ("gateway", cached),
                        ("caddy-gateway", behind), ("caddy-gateway", cached)]  # fmt: skip
    assert len(everything) == len(expected) == 25 + 6 + 4 + 3 + 6
    assert scenarios.REQUESTS["h"].body == "grant_type=client_credentials"
    assert [key for key, request in scenarios.REQUESTS.items() if request.client] == ["h", "i"]
    assert scenarios.REQUESTS["s"].bearer == "user"


def test_make_bench_runs_the_main_groups_and_bench_short_every_group():
    full, short = run.parse_arguments([]), run.parse_arguments(["--short"])
    assert full.groups == ("main", "matrix", "gateway", "rules")
    assert short.groups == GROUPS
    assert (full.rounds, full.seconds, short.rounds, short.seconds) == (5, 5, 1, 1)
    assert full.output == run.RESULTS / "latest.md"
    assert short.output is None
    assert run.parse_arguments(["--only", "scale"]).output == run.RESULTS / "scale.md"
    with pytest.raises(SystemExit):
        run.parse_arguments(["--only", "memcached"])
    makefile = (ROOT / "Makefile").read_text()
    assert "\tbench: " not in makefile
    assert re.search(
        r"^bench:.*\n\t\$\(BIN\)/python -m bench.run \$\(BENCH_ARGS\)$", makefile, re.M
    )
    assert re.search(r"^bench-short:.*\n\t\$\(BIN\)/python -m bench.run --short$", makefile, re.M)
    assert re.search(
        r"^bench-scale:.*\n\t\$\(BIN\)/python -m bench.run --only scale \$\(BENCH_ARGS\)$",
        makefile, re.M,
    )  # fmt: skip
    assert re.search(r"^soak:.*\n\t\$\(BIN\)/python -m tests.system.soak ", makefile, re.M)
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make bench-short" in ci
    assert "make soak SOAK_SECONDS=120" in ci


def test_every_app_starts_under_the_services_gunicorn_conf(tmp_path, monkeypatch):
    started = []

    class Popen:
        def __init__(self, command, **options):
            started.append((command, options["cwd"]))
            self.pid = 1

        def poll(self):
            return 0

    monkeypatch.setattr(servers.subprocess, "Popen", Popen)
    for kind, application in servers.APPLICATIONS.items():
        servers.Gunicorn(kind, application, {}, tmp_path / f"{kind}.log").start().stop()
    for command, cwd in started:
        assert command[command.index("-c") + 1] == "gunicorn.conf.py"
        assert cwd == ROOT
    # everything held against the service writes a request line, as the service does
    assert servers.APPLICATIONS["service"] == "wsgi:app"
    for kind in ("floor", *scenarios.PEERS):
        assert servers.APPLICATIONS[kind].startswith("bench.request_line:logged(")


def test_the_floor_answers_the_recorded_answers_and_logs_one_line_a_request(tmp_path, monkeypatch):
    answer = clients.Answer(403, [("Content-Type", "application/json"), ("Date", "x")], b"{}\n")
    (tmp_path / "floor.json").write_text(
        json.dumps({"GET /admin-accessible": clients.floor_answer(answer)})
    )
    monkeypatch.setenv("FLOOR_ANSWERS", str(tmp_path / "floor.json"))
    monkeypatch.delenv("FLOOR_STORE_URL", raising=False)
    sys.modules.pop("bench.floor_app", None)
    lines = []
    monkeypatch.setattr(request_line.os, "write", lambda fd, line: lines.append((fd, line)))
    floor = request_line.logged("bench.floor_app")
    answered = []
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/admin-accessible", "SERVER_NAME": "x",
               "SERVER_PORT": "80", "wsgi.url_scheme": "http"}  # fmt: skip
    for _ in range(2):
        body = b"".join(floor(dict(environ), lambda status, headers, exc=None: answered.append(
            (status, dict(headers)))))  # fmt: skip
        assert body == b"{}\n"
    assert answered[0][0].startswith("403")
    assert "Date" not in answered[0][1]
    assert len(lines) == 2
    assert all(fd == 1 and line.endswith(b"\n") for fd, line in lines)
    assert b'"status":403' in lines[0][1]
    assert b'"path":"/admin-accessible"' in lines[0][1]


def test_a_pair_is_the_median_of_its_rounds_ratios_and_checks_both_sides():
    case = Case("main", "e", SERVICE, FLOOR, "a", 1.10)
    rounds = [
        Pair(run_of(1000, 0.30, {401: 1000}, 401), run_of(1000, 0.20, {200: 1000})),
        Pair(run_of(1000, 0.50, {401: 1000}, 401), run_of(1000, 0.25, {200: 1000})),
        Pair(run_of(1000, 0.45, {401: 1000}, 401), run_of(1000, 0.50, {200: 1000})),
    ]
    summary = paired.summarize(case, rounds)
    assert summary.ratio == pytest.approx(1.5)  # of 1.5, 2.0
    assert 0.9, not 0.45 / 0.25
    assert (summary.lowest, summary.highest) == (pytest.approx(0.9), pytest.approx(2.0))
    assert (summary.service_us, summary.other_us) == (pytest.approx(450), pytest.approx(250))
    assert summary.ok
    assert summary.verdict is False
    assert summary.statuses == "401 / 200"
    wrong = [*rounds[:2], Pair(run_of(1000, 0.4, {401: 999, 500: 1}, 401), rounds[2].other)]
    assert not paired.summarize(case, wrong).ok
    short = [Pair(run_of(1000, 0.4, {401: 998}, 401), rounds[0].other)]  # two unanswered
    assert not paired.summarize(case, short).ok
    assert Pair(run_of(0, 0.1, {}, 401), rounds[0].other).ratio is None


def test_targets_are_at_most_and_the_peers_strictly_below():
    def verdict(case: Case, service_us: float, other_us: float) -> bool | None:
        return paired.summarize(case, [pair(service_us, other_us)]).verdict

    assert verdict(Case("main", "b", SERVICE, FLOOR, target=1.25), 1250, 1000) is True
    assert verdict(Case("main", "b", SERVICE, FLOOR, target=1.25), 1260, 1000) is False
    assert (
        verdict(Case("main", "a", SERVICE, App("pyjwt"), target=1.0, below=True), 500, 500) is False
    )
    assert (
        verdict(Case("main", "a", SERVICE, App("pyjwt"), target=1.0, below=True), 499, 500) is True
    )
    assert verdict(Case("main", "a*", SERVICE, FLOOR, "a"), 2000, 500) is None  # no target
    login, refresh = (Case("matrix", key, SERVICE, FLOOR, target=1.1) for key in "bc")
    summaries = [paired.summarize(refresh, [pair(1110, 1000)]),
                 paired.summarize(login, [pair(900, 1000, status=503)])]  # fmt: skip
    text = report.table(summaries, short=False)
    assert "| 1.11x | 1.11 - 1.11 | 1 | <= 1.10x | **missed** |" in text
    assert "**wrong statuses**" in text
    assert "missed" not in report.table(summaries, short=True)  # no verdicts when short


def test_both_sides_of_a_pair_run_at_once_each_with_its_request_and_tokens(monkeypatch, tmp_path):
    seen = []

    def one_run(side, key, held, seconds, args):
        started = time.monotonic()
        time.sleep(0.2)
        seen.append((side.app, key, held, started, time.monotonic()))
        return run_of(100, 0.01, {scenarios.REQUESTS[key].status: 100})

    class Stack:
        def __init__(self):
            apps = [SERVICE, FLOOR, App("pyjwt")]
            self.sides = {
                app: servers.Side(app, "http://127.0.0.1:1", [n]) for n, app in enumerate(apps)
            }

        def side(self, app):
            return self.sides[app]

        def held(self, app, service_side):
            return f"tokens of {(app if app.own_credentials else service_side).kind}"

        def store_pids(self):
            return [99]

    pinned = []
    monkeypatch.setattr(paired, "one_run", one_run)
    monkeypatch.setattr(paired.clients, "check", lambda *arguments: None)
    monkeypatch.setattr(paired, "pinned", lambda apps, stores: pinned.append((apps, stores))
                        or contextlib.nullcontext())  # fmt: skip
    case_list = [Case("main", "e", SERVICE, FLOOR, "a"), Case("main", "e", SERVICE, App("pyjwt"))]
    args = argparse.Namespace(warmup=0, rounds=2, seconds=1)
    pairs = paired.run_group(Stack(), case_list, args)
    assert [len(pairs[case]) for case in case_list] == [2, 2]
    assert pinned == [([0, 1, 2], [99])]  # every side's processes on the apps' CPU
    for one, other in zip(seen[::2], seen[1::2], strict=True):
        assert max(one[3], other[3]) < min(one[4], other[4])  # at the same time
    runs = {(app.kind, key, held) for app, key, held, *_ in seen}
    assert runs == {("service", "e", "tokens of service"), ("floor", "a", "tokens of service"),
                    ("pyjwt", "e", "tokens of pyjwt")}  # fmt: skip


def test_the_apps_get_the_last_cpu_and_wrk_and_the_stores_the_others():
    assert paired.split_cpus({0, 1}) == ({1}, {0})
    assert paired.split_cpus({0, 2, 5}) == ({5}, {0, 2})
    assert paired.split_cpus({3}) is None


@pytest.mark.processes
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_pinning_reaches_every_thread_of_the_master_and_its_children():
    code = (
        "import subprocess, sys, threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(child.pid, flush=True); time.sleep(60)\n"
    )
    master = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = None
    try:
        child = int(master.stdout.readline())
        cpus, _ = paired.split_cpus(os.sched_getaffinity(0))
        servers.pin(master.pid, cpus)
        tasks = [int(t) for pid in (master.pid, child) for t in os.listdir(f"/proc/{pid}/task")]
        assert len(tasks) >= 3
        assert all(os.sched_getaffinity(task) == cpus for task in tasks)
    finally:
        master.kill()
        master.wait()
        master.stdout.close()
        if child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, 9)


BURNER = """
import subprocess, sys, time
def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
if sys.argv[1] == "parent":
    subprocess.run([sys.executable, "-c", sys.argv[2], "child", sys.argv[2]], check=True)
    burn(0.2)
    print("burnt", flush=True)
    time.sleep(30)
else:
    burn(0.3)
"""


@pytest.mark.processes
def test_a_sides_cpu_counts_its_processes_own_time_and_their_reaped_childrens():
    with subprocess.Popen(
        [sys.executable, "-c", BURNER, "parent", BURNER], stdout=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stdout.readline().strip() == "burnt"
            side = servers.Side(FLOOR, "http://127.0.0.1:1", [process.pid, process.pid])
            seconds = servers.cpu_seconds(process.pid)
            assert 0.48 <= seconds < 2.5  # 0.3 s in the reaped child, 0.2 s in the parent
            assert side.cpu_seconds() == pytest.approx(2 * seconds, rel=0.1)
            assert servers.rss_kib(process.pid) > 1000
        finally:
            process.kill()
    assert servers.rss_kib(process.pid) is None


def test_wrk_report_is_read_with_its_units_statuses_and_socket_errors(tmp_path):
    result = wrk.parse(WRK_OUTPUT)
    assert (result.requests, result.requests_per_second) == (7690, pytest.approx(1534.52))
    assert (result.p50_ms, result.p99_ms) == (pytest.approx(0.812), pytest.approx(1200.0))
    assert result.statuses == {403: 7680, 500: 8}
    assert result.socket_error_count == 5
    with pytest.raises(ValueError, match="loopback"):
        wrk.command("http://10.0.0.1:8080/login", tmp_path / "x.lua", 1, 1, 1)
    assert wrk.lua_string('a"b\\c\n') == '"a\\034b\\092c\\010"'


def test_minted_tokens_verify_with_the_apps_secret_and_forged_ones_do_not():
    secret = "s" * 48
    template = jwt.encode(
        {"username": scenarios.HOLDER, "role": "user", "iat": 1, "exp": 2**40, "jti": "x"},
        secret, algorithm="HS256",
    )  # fmt: skip
    first, second = clients.mint(template, secret, 1), clients.mint(template, secret, 2)
    claims = jwt.decode(first, secret, algorithms=["HS256"])
    assert (claims["username"], claims["role"], claims["exp"]) == ("user1", "user", 2**40)
    assert claims["jti"] != jwt.decode(second, secret, algorithms=["HS256"])["jti"]
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(clients.forge_signature(template), secret, algorithms=["HS256"])


def test_the_prefill_goes_through_the_stores_own_issue(tmp_path):
    url = f"sqlite:///{tmp_path / 'tokens.sqlite3'}"
    servers.prefill(url, 10)
    assert servers.stored(url) == 10
    assert [len(open_store(url, timeout=2).tokens_of(f"user{n}")) for n in range(3)] == [4, 4, 2]


def test_the_sqlite_store_floor_writes_one_row_per_login_and_reads_the_known_one(tmp_path):
    from bench import store_floor

    url, known = f"sqlite:///{tmp_path / 'floor.sqlite3'}", "d" * 64
    store_floor.prepare(url, known)
    floor = store_floor.open_floor_store(url, known)
    floor.write()
    floor.write()
    floor.read()
    floor.close()
    with sqlite3.connect(tmp_path / "floor.sqlite3") as connection:
        assert connection.execute("SELECT count(*) FROM floor_tokens").fetchone() == (3,)
    with pytest.raises(AssertionError):
        store_floor.open_floor_store(url, "e" * 64).read()  # a 500, which the bench counts


def test_the_report_names_the_commit_and_the_files_changed_since(tmp_path):
    def git(*arguments: str) -> None:
        subprocess.run(["git", *arguments], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "app.py").write_text("one\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    commit = report.code_version(tmp_path)
    assert re.fullmatch(r"[0-9a-f]{7,}", commit)
    (tmp_path / "app.py").write_text("two\n")
    assert report.code_version(tmp_path) == f"{commit} with uncommitted changes to app.py"


def test_the_micro_benchmark_runs_every_request_in_process(capsys):
    micro.main(["--rounds", "1", "--calls", "2", "--distinct-tokens", "2", "--versus",
                "METRICS=off"])  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    keys = ["a", "a*", "b", "c", "d", "e", "f", "g", "h", "i", "s", "r", "v"]
    assert [line.split()[0] for line in lines] == keys
    assert all(re.search(r"µs  versus +[\d.]+ µs  ratio [\d.]+$", line) for line in lines)


def test_the_holder_logs_in_at_the_service_once_a_session_and_at_a_peer_once(tmp_path, monkeypatch):
    template = jwt.encode({"username": scenarios.HOLDER, "exp": 2**40}, "s" * 48)
    logins = []
    monkeypatch.setattr(clients, "log_in", lambda url: logins.append(url)
                        or {"accessToken": template, "refreshToken": "r"})  # fmt: skip
    stack = servers.Stack(tmp_path, 2)
    peer = App("pyjwt")
    stack.sides = {
        SERVICE: servers.Side(SERVICE, "http://127.0.0.1:1", [1], "http://127.0.0.1:1",
                              "s" * 48, None, "Basic eA=="),
        peer: servers.Side(peer, "http://127.0.0.1:2", [2], "http://127.0.0.1:2", "p" * 48),
    }  # fmt: skip
    held = stack.held(FLOOR, SERVICE)  # the floor's requests carry the service's tokens
    assert logins == ["http://127.0.0.1:1"] * scenarios.HOLDER_SESSIONS
    assert held.client_authorization == "Basic eA=="
    assert stack.held(SERVICE, SERVICE) is held
    assert not stack.held(peer, SERVICE).client_authorization
    assert logins[scenarios.HOLDER_SESSIONS :] == ["http://127.0.0.1:2"]


def test_the_registered_client_is_the_services_own_and_its_requests_are_answered(tmp_path):
    from app.oauth.clients import ClientRegistry

    authorization = clients.register_client(tmp_path / "clients.json")
    assert (tmp_path / "clients.json").stat().st_mode & 0o777 == 0o600
    client_id, secret = base64.b64decode(authorization.removeprefix("Basic ")).decode().split(":")
    assert client_id == clients.CLIENT_ID
    assert ClientRegistry(str(tmp_path / "clients.json")).authenticate(client_id, secret)
    # the service as the bench sets it up (micro.prepared: in process), answering h, i and s
    folder = tmp_path / "app"
    folder.mkdir()
    with micro.quiet_stdout():
        app, held, _ = micro.prepared({}, str(folder), 0)
    answers = {}
    for key in ("h", "i", "s"):
        request = scenarios.REQUESTS[key]
        headers, body = clients.request_parts(request, held)
        response = Client(app).open(
            request.path, method=request.method, headers=headers, data=body,
            environ_base={"REMOTE_ADDR": "127.0.0.1"},
        )  # fmt: skip
        assert response.status_code == request.status
        answers[key] = response.get_json()
    assert jwt.decode(answers["h"]["access_token"], options={"verify_signature": False})[
        "username"] == f"client:{clients.CLIENT_ID}"  # fmt: skip
    assert (answers["i"]["active"], answers["i"]["username"]) == (True, scenarios.HOLDER)
    assert len(answers["s"]["sessions"]) == scenarios.HOLDER_SESSIONS
