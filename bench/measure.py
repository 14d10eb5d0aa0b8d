"""One measured wrk run against one server, and the check that every app answers as expected."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench import scenarios, wrk
from bench.report import Run
from bench.scenarios import Credentials, Scenario
from bench.servers import Server

#: Seconds between the end of a wrk run and the CPU reading, for requests still in flight.
SETTLE_SECONDS = 0.1


def check_answers(
    server: Server, scenario_list: list[Scenario], credentials: Credentials
) -> dict[str, scenarios.Answer]:
    """Send each scenario once; raise unless every answer has the expected status."""
    answers = {}
    for scenario in scenario_list:
        headers, body = scenarios.request_parts(scenario, credentials)
        answer = scenarios.send(server.url + scenario.path, scenario.method, headers, body)
        if answer.status != scenario.expected_status:
            raise RuntimeError(
                f"{server.name}, scenario {scenario.key} ({scenario.title}): expected "
                f"{scenario.expected_status}, got {answer.status} {answer.body[:200]!r}"
            )
        answers[scenario.key] = answer
    return answers


def one_run(
    server: Server,
    scenario: Scenario,
    credentials: Credentials,
    args: argparse.Namespace,
    folder: Path,
    seconds: int,
    connections: int | None = None,
) -> Run:
    """Run wrk once against ``server`` and return what it saw with the server's CPU time."""
    script = scenarios.wrk_script(scenario, credentials)
    before = server.cpu_seconds()
    result = wrk.run(
        server.url + scenario.path, script, folder / f"scenario-{server.listener.fileno()}.lua",
        seconds=seconds, connections=connections or args.connections, threads=args.threads,
    )  # fmt: skip
    time.sleep(SETTLE_SECONDS)
    return Run(result, server.cpu_seconds() - before)
