"""Drive wrk: one Lua script per request shape, and its output read back into numbers."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

#: Counts every response's status in each wrk thread; ``done`` prints the totals.
STATUS_COUNTER = """
statuses = {}
answered = 0
local threads = {}
function setup(thread)
    table.insert(threads, thread)
end
function response(status, headers, body)
    statuses[status] = (statuses[status] or 0) + 1
    answered = answered + 1
    if limit and answered >= limit then
        wrk.thread:stop()
    end
end
function done(summary, latency, requests)
    local totals = {}
    for _, thread in ipairs(threads) do
        for status, count in pairs(thread:get("statuses")) do
            totals[status] = (totals[status] or 0) + count
        end
    end
    for status, count in pairs(totals) do
        io.write(string.format("status %d %d\\n", status, count))
    end
end
"""
LATENCY_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}


@dataclass(frozen=True)
class WrkResult:
    """What one wrk run saw."""

    requests: int
    seconds: float
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    non_2xx: int
    socket_errors: dict[str, int]
    statuses: dict[int, int] = field(default_factory=dict)

    @property
    def socket_error_count(self) -> int:
        return sum(self.socket_errors.values())


def lua_string(text: str) -> str:
    """Return ``text`` as a Lua string literal (bytes outside printable ASCII escaped)."""
    escaped = []
    for byte in text.encode():
        char = chr(byte)
        if char in '"\\' or not 32 <= byte < 127:
            escaped.append(f"\\{byte:03d}")
        else:
            escaped.append(char)
    return '"' + "".join(escaped) + '"'


def fixed_request_script(method: str, headers: dict[str, str], body: str | None) -> str:
    """Return a script that sends the same request again and again."""
    lines = [f"wrk.method = {lua_string(method)}"]
    lines += [f"wrk.headers[{lua_string(k)}] = {lua_string(v)}" for k, v in headers.items()]
    if body is not None:
        lines.append(f"wrk.body = {lua_string(body)}")
    return "\n".join(lines) + "\n" + STATUS_COUNTER


def numbered_request_script(method: str, headers: dict[str, str], distinct: int) -> str:
    """Return a script that sends bodiless requests whose headers' "{n}" counts 1 to
    ``distinct``, then again from 1."""
    fixed = {name: value for name, value in headers.items() if "{n}" not in value}
    numbered = [
        f"wrk.headers[{lua_string(name)}] = {lua_string(before)} .. n .. {lua_string(after)}"
        for name, value in headers.items()
        if "{n}" in value
        for before, after in [value.split("{n}", 1)]
    ]
    return (
        fixed_request_script(method, fixed, None)
        + f"""
local n = 0
request = function()
    n = n % {int(distinct)} + 1
    {chr(10).join(numbered)}
    return wrk.format()
end
"""
    )


def bearer_cycle_script(token_file: Path) -> str:
    """Return a script that sends GETs, each with the next token of ``token_file`` (one a line)."""
    return (
        f"""
local tokens, next_index = {{}}, 0
for line in io.lines({lua_string(str(token_file))}) do tokens[#tokens + 1] = line end
request = function()
    next_index = next_index % #tokens + 1
    return wrk.format("GET", nil, {{["Authorization"] = "Bearer " .. tokens[next_index]}})
end
"""
        + STATUS_COUNTER
    )


def counted_logins_script(count: int) -> str:
    """Return a script of about ``count`` form logins, each with a username of its own."""
    return (
        f"""
limit = {int(count)}
local sent = 0
request = function()
    sent = sent + 1
    return wrk.format("POST", nil,
        {{["Content-Type"] = "application/x-www-form-urlencoded"}},
        "username=user" .. sent .. "&password=x")
end
"""
        + STATUS_COUNTER
    )


def command(url: str, script_path: Path, seconds: int, connections: int, threads: int) -> list:
    """Return wrk's command line for ``url``, which must be a loopback address."""
    if not re.match(r"http://(127\.\d+\.\d+\.\d+|\[::1\]|localhost)[:/]", url):
        raise ValueError(f"wrk is only pointed at loopback addresses, not {url}")
    return [
        "wrk", "--latency", "-t", str(threads), "-c", str(connections),
        "-d", f"{seconds}s", "--timeout", "5s", "-s", str(script_path), url,
    ]  # fmt: skip


def run(
    url: str,
    script: str,
    script_path: Path,
    *,
    seconds: int,
    connections: int,
    threads: int,
) -> WrkResult:
    """Run wrk for ``seconds`` against ``url`` and return what it saw."""
    arguments = command(url, script_path, seconds, connections, threads)
    script_path.write_text(script)
    completed = subprocess.run(
        arguments, capture_output=True, text=True, timeout=seconds + 30, check=False
    )
    if completed.returncode != 0:
        raise RuntimeError(f"wrk failed ({completed.returncode}): {completed.stderr.strip()}")
    return parse(completed.stdout)


def run_until(
    url: str,
    script: str,
    script_path: Path,
    done: Callable[[], bool],
    *,
    seconds: int,
    connections: int,
    threads: int,
) -> WrkResult:
    """Run wrk until ``done()`` holds (polled twice a second), ``seconds`` at most.

    wrk sleeps out its whole duration even when every thread has stopped, but ends
    early, with its usual report, on SIGINT.
    """
    arguments = command(url, script_path, seconds, connections, threads)
    script_path.write_text(script)
    with subprocess.Popen(
        arguments, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        deadline = time.monotonic() + seconds + 30
        try:
            while process.poll() is None and not done():
                if time.monotonic() > deadline:
                    raise RuntimeError("wrk ran past its duration")
                time.sleep(0.5)
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
            output, errors = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(10)
    if process.returncode != 0:
        raise RuntimeError(f"wrk failed ({process.returncode}): {errors.strip()}")
    return parse(output)


def parse(output: str) -> WrkResult:
    """Read wrk's ``--latency`` report, with the status lines of STATUS_COUNTER."""
    summary = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m|h),", output)
    if summary is None:
        raise ValueError(f"no request count in wrk's output:\n{output}")
    errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    return WrkResult(
        requests=int(summary.group(1)),
        seconds=float(summary.group(2)) * LATENCY_UNITS_MS[summary.group(3)] / 1000,
        requests_per_second=float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1)),
        p50_ms=_latency_ms(output, "50%"),
        p99_ms=_latency_ms(output, "99%"),
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        socket_errors=dict(
            zip(
                ("connect", "read", "write", "timeout"),
                (int(value) for value in errors.groups()) if errors else (0, 0, 0, 0),
                strict=True,
            )
        ),
        statuses={
            int(status): int(count)
            for status, count in re.findall(r"^status (\d+) (\d+)$", output, re.M)
        },
    )


def _latency_ms(output: str, percentile: str) -> float:
    match = re.search(rf"^\s*{re.escape(percentile)}\s+([\d.]+)(us|ms|s|m|h)\s*$", output, re.M)
    if match is None:
        raise ValueError(f"no {percentile} latency in wrk's output")
    return float(match.group(1)) * LATENCY_UNITS_MS[match.group(2)]
