"""The faults of a soak, on a schedule scaled to its length, each recorded when it happens."""

from __future__ import annotations

import os
import secrets
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

#: The schedule of a 600-second soak; a shorter one scales it down (``Schedule.of``).
FULL_LENGTH = 600.0
KILL_INTERVAL = 30.0
#: How long Redis stays down when it is restarted.
REDIS_DOWN = 3.0


@dataclass
class Fault:
    at: float  # seconds since the run started
    kind: str  # "kill -9", "HUP", "key added", "key retired", "store outage", "token lost"
    detail: str
    until: float | None = None  # the end of a fault that lasts (a restart, an outage)


@dataclass(frozen=True)
class Schedule:
    """When each fault happens, in seconds since the run started."""

    seconds: float
    warmup: float
    kills: tuple[float, ...]
    hup: float
    key_added: float
    store_restart: float
    access_lifetime: int
    lose_token: float | None = None

    @classmethod
    def of(cls, seconds: float, faults: set[str], lose_token: bool = False) -> Schedule:
        scale = min(1.0, seconds / FULL_LENGTH)
        interval = max(3.0, KILL_INTERVAL * scale)
        kills = ()
        if "kill" in faults:
            kills = tuple(interval * n for n in range(1, int((seconds - 1) / interval) + 1))
        never = seconds * 10
        return cls(
            seconds=seconds,
            warmup=seconds * 0.1,
            kills=kills,
            hup=seconds * 0.15 if "hup" in faults else never,
            key_added=seconds * 0.25 if "keys" in faults else never,
            store_restart=seconds * 0.45 if "store" in faults else never,
            # long enough for a client to use each token many times, short enough for
            # the old key to be retired early in the run: 30 s of a 600-second soak
            access_lifetime=max(5, round(seconds * 0.05)),
            lose_token=seconds * 0.5 if lose_token else None,
        )


class FaultRunner(threading.Thread):
    """Carries out the schedule against the run's stack; ``actions`` do the work."""

    def __init__(self, schedule: Schedule, origin: float, actions: dict[str, Callable[[], str]]):
        super().__init__(name="faults", daemon=True)
        self.schedule, self.origin, self.actions = schedule, origin, actions
        self.faults: list[Fault] = []
        self.error: BaseException | None = None
        self.stopping = threading.Event()

    def now(self) -> float:
        return time.monotonic() - self.origin

    def plan(self) -> list[tuple[float, str]]:
        plan = [(at, "kill -9") for at in self.schedule.kills]
        plan += [(self.schedule.hup, "HUP"), (self.schedule.key_added, "key added")]
        plan += [(self.schedule.store_restart, "store outage")]
        if self.schedule.lose_token is not None:
            plan.append((self.schedule.lose_token, "token lost"))
        return sorted(item for item in plan if item[0] < self.schedule.seconds)

    def run(self) -> None:
        try:
            pending = self.plan()
            retire_at: float | None = None
            for _ in range(len(pending) + 2):  # bounded: each fault once, the retirement once
                if retire_at is not None and (not pending or pending[0][0] > retire_at):
                    pending.insert(0, (retire_at, "key retired"))
                    retire_at = None
                if not pending:
                    return
                at, kind = pending.pop(0)
                if self.stopping.wait(max(0.0, at - self.now())):
                    return
                started = self.now()
                detail = self.actions[kind]()
                fault = Fault(started, kind, detail, self.now())
                self.faults.append(fault)
                if kind == "key added":  # the old key retires one access-token lifetime later
                    retire_at = fault.until + self.schedule.access_lifetime + 1  # type: ignore[operator]
        except BaseException as error:
            self.error = error


def kill_worker(pid: int | None) -> str:
    if pid is None:
        return "no worker to kill"
    os.kill(pid, signal.SIGKILL)
    return f"worker {pid}"


def new_secret() -> str:
    return secrets.token_urlsafe(48)
