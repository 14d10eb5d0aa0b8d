"""The benchmark's own arithmetic: wrk's report, /proc and the targets, read and judged right."""

from __future__ import annotations

import argparse
import contextlib
import os
import sqlite3
import subprocess
import sys
import time

import jwt
import pytest

from bench import gateway, paired, procstat, report, run, scale, scenarios, servers, wrk
from bench.report import Run, Summary

WRK_OUTPUT = """\
Running 5s test @ http://127.0.0.1:41234/admin-accessible
  1 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     9.34ms    3.85ms  17.42ms   81.09%
    Req/Sec     1.09k   525.80     2.34k    80.00%
  Latency Distribution
     50%  812.00us
     75%    6.15ms
     90%   10.34ms
     99%    1.20s
  7690 requests in 5.01s, 553.70KB read
  Socket errors: connect 0, read 3, write 0, timeout 2
  Non-2xx or 3xx responses: 7688
Requests/sec:   1534.52
Transfer/sec:    110.51KB
status 403 7680
status 500 8
"""


def test_wrk_report_is_read_with_its_units_statuses_and_socket_errors():
    result = wrk.parse(WRK_OUTPUT)
    assert result.requests == 7690
    assert result.seconds == pytest.approx(5.01)
    assert result.requests_per_second == pytest.approx(1534.52)
    assert result.p50_ms == pytest.approx(0.812)
    assert result.p99_ms == pytest.approx(1200.0)
    assert result.non_2xx == 7688
    assert result.statuses == {403: 7680, 500: 8}
    assert result.socket_errors == {"connect": 0, "read": 3, "write": 0, "timeout": 2}
    assert result.socket_error_count == 5


def test_wrk_report_without_errors_has_none():
    clean = WRK_OUTPUT.replace("  Socket errors: connect 0, read 3, write 0, timeout 2\n", "")
    clean = clean.replace("  Non-2xx or 3xx responses: 7688\n", "")
    result = wrk.parse(clean)
    assert (result.socket_error_count, result.non_2xx) == (0, 0)


def test_wrk_is_pointed_at_loopback_only(tmp_path):
    with pytest.raises(ValueError, match="loopback"):
        wrk.command("http://10.0.0.1:8080/login", tmp_path / "x.lua", 1, 1, 1)
    assert "http://127.0.0.1:8080/login" in wrk.command(
        "http://127.0.0.1:8080/login", tmp_path / "x.lua", 1, 1, 1
    )


def test_lua_strings_escape_quotes_backslashes_and_control_bytes():
    assert wrk.lua_string('a"b\\c\n') == '"a\\034b\\092c\\010"'


def write_stat(proc, pid: int, command: str, ppid: int, times: tuple[int, int, int, int]) -> None:
    folder = proc / str(pid)
    (folder / "task" / str(pid)).mkdir(parents=True)
    fields = ["S", str(ppid)] + ["0"] * 9 + [str(value) for value in times] + ["0"] * 30
    (folder / "stat").write_text(f"{pid} ({command}) {' '.join(fields)}\n")


def test_cpu_ticks_are_utime_stime_cutime_cstime_even_when_the_name_has_parentheses(tmp_path):
    write_stat(tmp_path, 100, "gunicorn: master [wsgi:app] (x) y", 1, (10, 20, 300, 4000))
    assert procstat.cpu_ticks(100, tmp_path) == 4330


def test_tree_cpu_adds_the_children_of_the_master(tmp_path):
    write_stat(tmp_path, 100, "gunicorn", 1, (1, 2, 0, 0))
    write_stat(tmp_path, 101, "gunicorn", 100, (10, 0, 0, 0))
    write_stat(tmp_path, 102, "gunicorn", 100, (0, 20, 0, 0))
    write_stat(tmp_path, 103, "other", 1, (500, 500, 0, 0))
    (tmp_path / "100" / "task" / "100" / "children").write_text("101 102 ")
    assert procstat.children(100, tmp_path) == [101, 102]
    assert procstat.tree_cpu_seconds(100, tmp_path) == pytest.approx(33 / procstat.TICKS_PER_SECOND)
    (tmp_path / "100" / "task" / "100" / "children").unlink()  # no CONFIG_PROC_CHILDREN
    assert procstat.children(100, tmp_path) == [101, 102]


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


def test_tree_cpu_of_a_real_process_counts_its_own_time_and_its_reaped_childs():
    with subprocess.Popen(
        [sys.executable, "-c", BURNER, "parent", BURNER], stdout=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "burnt"
            seconds = procstat.tree_cpu_seconds(process.pid)
            # 0.3 s in the reaped child, 0.2 s in the parent, plus two interpreters' start-up
            assert 0.5 - 2 / procstat.TICKS_PER_SECOND <= seconds < 2.5
            assert procstat.rss_kib(process.pid) > 1000
        finally:
            process.kill()


def run_of(requests: int, cpu_seconds: float, statuses: dict[int, int]) -> Run:
    result = wrk.WrkResult(
        requests=requests, seconds=1.0, requests_per_second=float(requests), p50_ms=1.0,
        p99_ms=2.0, non_2xx=0, socket_errors={"connect": 0, "read": 0, "write": 0, "timeout": 0},
        statuses=statuses,
    )  # fmt: skip
    return Run(result, cpu_seconds)


def test_summary_takes_the_median_cost_and_counts_every_unexpected_answer():
    runs = [
        run_of(1000, 0.5, {403: 1000}),
        run_of(1000, 0.9, {403: 999, 500: 1}),
        run_of(1000, 0.6, {403: 998}),  # two requests with no status seen
    ]
    summary = report.summarize(runs, 403)
    assert summary.cpu_us == pytest.approx(600)
    assert summary.unexpected == 3
    assert not summary.ok
    assert report.summarize(runs[:1], 403).ok


def summary(cpu_us: float) -> Summary:
    return report.summarize([run_of(1000, cpu_us / 1000, {200: 1000})], 200)


def pair_summary(service_us: float, other_us: float) -> paired.PairSummary:
    pair = paired.Pair(run_of(1000, service_us / 1000, {200: 1000}),
                       run_of(1000, other_us / 1000, {200: 1000}))  # fmt: skip
    return paired.summarize([pair], 200, 200)


def test_targets_are_judged_on_the_paired_ratios():
    scenario_list = scenarios.scenarios(3000)
    peers = ["peer one", "peer two"]
    costs = {
        ("floor", "a"): (500, 500),  # 1.00x: met
        ("floor", "e"): (560, 500),  # against the floor's a: 1.12x > 1.10x: missed
        ("floor", "b"): (1250, 1000),  # 1.25x: met
        ("floor", "c"): (1260, 1000),  # missed
        ("peer one", "a"): (500, 600), ("peer two", "a"): (500, 499),  # not below peer two
        ("peer one", "b"): (1250, 1300), ("peer two", "b"): (1250, 1400),
        ("peer one", "c"): (900, 1000),  # peer two not measured
    }  # fmt: skip
    pair_summaries = {key: pair_summary(*cost) for key, cost in costs.items()}
    found = {target.what: target for target in report.targets(scenario_list, pair_summaries, peers)}
    verdicts = {what: target.met for what, target in found.items()}
    assert verdicts["a: service CPU/request vs floor a"] is True
    assert verdicts["e: service CPU/request vs floor a"] is False
    assert verdicts["b: service CPU/request vs floor b"] is True
    assert verdicts["c: service CPU/request vs floor c"] is False
    assert verdicts["d: service CPU/request vs floor d"] is None  # not measured
    assert verdicts["a: service CPU/request below both peers"] is False
    assert verdicts["b: service CPU/request below both peers"] is True
    assert verdicts["c: service CPU/request below both peers"] is None
    assert found["b: service CPU/request below both peers"].value == "0.96x, 0.89x"


def test_the_gateway_check_is_judged_against_the_floor_alone():
    scenario_list = scenarios.scenarios(3000)
    (check,) = [scenario for scenario in scenario_list if scenario.path == "/auth/check"]
    assert (check.key, check.floor_key, check.peers) == ("g", "a", False)  # the peers lack it
    assert check not in run.peer_scenarios(scenario_list)
    pair_summaries = {("floor", "g"): pair_summary(470, 500)}  # 0.94x
    found = {t.what: t for t in report.targets(scenario_list, pair_summaries, ["peer one"])}
    assert found["g: service CPU/request vs floor a"].met is True
    assert found["g: service CPU/request vs floor a"].limit == "<= 0.95x"
    assert "g: service CPU/request below both peers" not in found


def test_the_gateway_bench_reads_its_paths_against_the_straight_one():
    result = wrk.parse(WRK_OUTPUT)
    runs = {path: [result] for path in gateway.PATHS}
    text = gateway.table(runs)
    assert "| straight | 1535 | 1.00x | 0.81 | 1200.00 | 403 (7680), 500 (8) |" in text


def test_a_pair_summary_is_the_median_of_the_rounds_ratios_and_checks_both_statuses():
    rounds = [
        paired.Pair(run_of(1000, 0.30, {401: 1000}), run_of(1000, 0.20, {200: 1000})),
        paired.Pair(run_of(1000, 0.50, {401: 1000}), run_of(1000, 0.25, {200: 1000})),
        paired.Pair(run_of(1000, 0.45, {401: 1000}), run_of(1000, 0.50, {200: 1000})),
    ]
    summary = paired.summarize(rounds, 401, 200)
    assert summary.ratio == pytest.approx(1.5)  # of 1.5, 2.0 and 0.9, not 0.45/0.25
    assert (summary.lowest, summary.highest) == (pytest.approx(0.9), pytest.approx(2.0))
    assert summary.service_us == pytest.approx(450)
    assert summary.other_us == pytest.approx(250)
    assert summary.rounds == 3
    assert summary.ok
    assert not paired.summarize(rounds, 401, 401).ok  # the other app's 200s were wrong
    no_requests = paired.Pair(run_of(0, 0.1, {}), run_of(1000, 0.2, {200: 1000}))
    assert no_requests.ratio is None
    assert paired.summarize([no_requests], 401, 200).ratio is None


def test_servers_get_the_last_cpu_and_wrk_the_others():
    assert paired.split_cpus({0, 1}) == ({1}, {0})
    assert paired.split_cpus({0, 2, 5}) == ({5}, {0, 2})
    assert paired.split_cpus({3}) is None  # one CPU: nothing to pin


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_pinning_reaches_every_thread_of_the_master_and_its_children(tmp_path):
    code = (
        "import subprocess, sys, threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(child.pid, flush=True); time.sleep(60)\n"
    )
    server = servers.Server("test", [], "", tmp_path, {}, tmp_path / "log")
    master = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    server.process = master
    child = None
    try:
        child = int(master.stdout.readline())
        server_cpus, _ = paired.split_cpus(os.sched_getaffinity(0))
        paired.pin(server, server_cpus)
        tasks = [
            int(task) for pid in (master.pid, child) for task in os.listdir(f"/proc/{pid}/task")
        ]
        assert len(tasks) >= 3  # the master's two threads and the child
        assert all(os.sched_getaffinity(task) == server_cpus for task in tasks)
    finally:
        master.kill()
        master.wait()
        master.stdout.close()
        server.listener.close()
        if child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, 9)


def test_minted_tokens_verify_with_the_apps_secret_and_forged_ones_do_not():
    secret = "s" * 48
    template = jwt.encode(
        {"username": scenarios.HOLDER, "role": "user", "iat": 1, "exp": 2**40, "jti": "x"},
        secret,
        algorithm="HS256",
    )
    first, second = scenarios.mint(template, secret, 1), scenarios.mint(template, secret, 2)
    claims = jwt.decode(first, secret, algorithms=["HS256"])
    assert claims["username"] == "user1"
    assert (claims["role"], claims["exp"]) == ("user", 2**40)
    assert claims["jti"] != jwt.decode(second, secret, algorithms=["HS256"])["jti"]
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(scenarios.forge_signature(template), secret, algorithms=["HS256"])


def test_print_config_is_read_as_settings_and_worker_options():
    output = "workers                            = 5\nworker_class      = sync\nthreads = 1\n"
    output += "keepalive                          = 5\nbind = ['0.0.0.0:8080']\nproc_name = \n"
    settings = servers.parse_print_config(output)
    assert settings["bind"] == "['0.0.0.0:8080']"
    assert settings["proc_name"] == ""
    arguments = servers.worker_arguments(settings)
    assert arguments == [
        "--workers", "5", "--worker-class", "sync", "--threads", "1", "--keep-alive", "5"
    ]  # fmt: skip


def test_counted_logins_end_when_the_store_grew_enough_or_stopped_growing(tmp_path):
    path = tmp_path / "store.sqlite3"
    scale.prefill(path, 10)
    growth = scale.StoreGrowth(path, count=3, stall_seconds=0.2)
    with sqlite3.connect(path) as connection:
        connection.execute(
            "INSERT INTO refresh_tokens (digest, username, issued_at)"
            " VALUES ('a', 'alice', 1), ('b', 'bob', 1)"
        )
    assert growth() is False  # 12 of 13, still growing
    with sqlite3.connect(path) as connection:
        connection.execute(
            "INSERT INTO refresh_tokens (digest, username, issued_at) VALUES ('c', 'carol', 1)"
        )
    assert growth() is True
    stalled = scale.StoreGrowth(path, count=100, stall_seconds=0.2)
    assert stalled() is False
    time.sleep(0.3)
    assert stalled() is True  # a failed login leaves the count short: stop anyway


def test_the_report_names_the_commit_and_the_files_changed_since(tmp_path):
    from bench.run import code_version

    def git(*arguments: str) -> None:
        subprocess.run(["git", *arguments], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "app.py").write_text("one\n")
    (tmp_path / "README.md").write_text("one\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    commit = code_version(tmp_path)
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=tmp_path, capture_output=True, text=True
    )
    assert commit == head.stdout.strip()
    (tmp_path / "README.md").write_text("two\n")
    (tmp_path / "notes.txt").write_text("untracked: not the measured code\n")
    assert code_version(tmp_path) == f"{commit} with uncommitted changes to README.md"
    (tmp_path / "app.py").write_text("two\n")
    assert code_version(tmp_path) == f"{commit} with uncommitted changes to README.md, app.py"


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
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    missing = store_floor.open_floor_store(url, "e" * 64)
    with pytest.raises(AssertionError):
        missing.read()  # a read that finds nothing is a 500, which the bench counts
    with pytest.raises(ValueError, match="no floor store"):
        store_floor.open_floor_store("memcached://127.0.0.1", known)


def test_the_store_matrix_judges_each_store_and_request_and_names_what_it_skipped():
    from bench import matrix

    def pairs(service_us: float, other_us: float, status: int = 200) -> list[paired.Pair]:
        return [
            paired.Pair(run_of(1000, service_us / 1000, {status: 1000}),
                        run_of(1000, other_us / 1000, {200: 1000}))
        ]  # fmt: skip

    outcomes = [
        matrix.Outcome("SQLite", "SQLite: WAL", {"b": pairs(1100, 1000), "c": pairs(1110, 1000)}),
        matrix.Outcome("Redis", "Redis: AOF", {"b": pairs(900, 1000), "c": pairs(900, 1000, 503)}),
        matrix.Outcome("PostgreSQL", skipped="no server here"),
    ]
    args = argparse.Namespace(seconds=5, warmup=1, connections=16, short=False)
    status, markdown = matrix.render(args, 1, outcomes)

    def row(store: str, request: str) -> str:
        return next(
            line for line in markdown.splitlines() if line.startswith(f"| {store} | {request}")
        )

    assert row("SQLite", "login").endswith("| 1.10x | 1.10 - 1.10 | 1 | <= 1.10x | met |")
    assert row("SQLite", "refresh").endswith("| <= 1.10x | **missed** |")  # 1.11x
    assert row("Redis", "login").endswith("| 0.90x | 0.90 - 0.90 | 1 | <= 1.10x | met |")
    assert row("Redis", "refresh").endswith("| **wrong statuses** |")
    assert "not run: no server here" in markdown
    assert status == 1  # a 503 among the answers
    assert [backend.name for backend in matrix.BACKENDS] == ["SQLite", "Redis", "PostgreSQL"]
    with pytest.raises(ValueError, match="no store named memcached"):
        matrix.run(argparse.Namespace(stores="sqlite,memcached"), 1)  # before starting anything
    short = argparse.Namespace(seconds=1, warmup=0, connections=16, short=True)
    assert "| met |" not in matrix.render(short, 1, outcomes[:1])[1]  # no verdict when short


def test_the_scale_report_judges_each_store_against_1_05x():
    def pairs(full_us: float, empty_us: float) -> list[paired.Pair]:
        return [
            paired.Pair(run_of(1000, full_us / 1000, {200: 1000}),
                        run_of(1000, empty_us / 1000, {200: 1000}))
        ]  # fmt: skip

    logins = wrk.WrkResult(
        requests=100, seconds=1.0, requests_per_second=100.0, p50_ms=1.0, p99_ms=2.0,
        non_2xx=0, socket_errors={"connect": 0, "read": 0, "write": 0, "timeout": 0},
        statuses={200: 100},
    )  # fmt: skip
    memory = {"before": {1: 1000}, "after": {1: 1020}, "warmup": logins, "result": logins,
              "replaced": []}  # fmt: skip
    args = argparse.Namespace(stored_tokens=10, rounds=1, seconds=1, threads=1, connections=2,
                              warmup_logins=10, logins=100)  # fmt: skip
    results = [
        scale.StoreScale("SQLite", 1.0, 11, pairs(1050, 1000)),
        scale.StoreScale("Redis", 1.0, 11, pairs(1060, 1000)),
    ]
    settings = {"workers": "2", "worker_class": "gthread"}
    status, markdown = scale.render(args, settings, results, memory)
    assert status == 0
    assert "| SQLite: /token CPU/request, full store vs empty | 1.05x (1.05 - 1.05) " in markdown
    assert "| <= 1.05x | met |" in markdown
    assert "| Redis: /token CPU/request, full store vs empty | 1.06x" in markdown
    assert "| <= 1.05x | **missed** |" in markdown
