"""One soak on one store: the stack, the clients, the faults, the end checks, the verdict."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.servers import base_environment
from tests.system.soak import checks
from tests.system.soak.client import Answer, Connection
from tests.system.soak.faults import (
    REDIS_DOWN,
    Fault,
    FaultRunner,
    Schedule,
    kill_worker,
    new_secret,
)
from tests.system.soak.sampler import Sample, Sampler
from tests.system.soak.stack import Gunicorn, Nginx, Redis, wait_for
from tests.system.soak.users import LIVE, REVOKED, ROTATED, Abuser, Client, Keys, Ledger, User

#: Workers per gunicorn: two, so that one lives on while the other is killed.
WORKERS = 2
ABUSERS = 3
#: Bursts a second of each client over the rate limit (users.Abuser.BURST logins each).
ABUSER_RATE = 0.5
#: The states of a token at the end, and what presenting it must then answer.
FINAL_EXPECTATIONS = (
    (LIVE, "kept token", (200,)),
    (REVOKED, "revoked token", (401,)),
    (ROTATED, "rotated token", (401,)),
)


@dataclass
class Options:
    store: str  # "sqlite" or "redis"
    seconds: float
    folder: Path
    users: int = 24
    rate: float = 12.0  # requests a second per user
    faults: set[str] = field(default_factory=lambda: {"kill", "hup", "keys", "store"})
    lose_token: bool = False  # the harness's own test: a token lost behind the service's back


@dataclass
class Outcome:
    options: Options
    schedule: Schedule
    answers: list[Answer]
    final: list[Answer]
    faults: list[Fault]
    samples: list[Sample]
    first_seen: dict[int, float]
    tokens: dict[str, int]
    mismatches: list[str]
    origin: float
    verdict: list[checks.Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.verdict)


def soak(options: Options) -> Outcome:
    """Run one soak; every server is stopped before it returns, whatever happens."""
    run = Soak(options)
    try:
        run.start()
        return run.drive()
    finally:
        run.stop()


class Soak:
    """The servers of one soak, and the faults done to them."""

    def __init__(self, options: Options):
        faults = set(options.faults)
        if options.store != "redis":
            faults.discard("store")
        self.options = options
        self.schedule = Schedule.of(options.seconds, faults, options.lose_token)
        folder = options.folder
        self.secrets = (new_secret(), new_secret())  # the first key, and the one after it
        self.redis = Redis(folder / "redis") if options.store == "redis" else None
        env = {
            **base_environment(),
            "INSTANCE_PATH": str(folder / "instance"),
            "SIGNING_SECRET": self.secrets[0],
            "ACCESS_TOKEN_LIFETIME": str(self.schedule.access_lifetime),
            "TRUSTED_PROXIES": "127.0.0.1/32",  # nginx, as deploy/token-service.env.example
            "OPEN_LOGIN": "true",  # the soak logs in as anyone, through nginx
            "LOG_LEVEL": "WARNING",
        }
        if self.redis is not None:
            env["TOKEN_STORE_URL"] = self.redis.url
        sqlite_url = f"sqlite:///{folder / 'instance' / 'refresh_tokens.sqlite3'}"
        self.store_url = self.redis.url if self.redis else sqlite_url
        rotating = {**env, "REFRESH_TOKEN_ROTATION": "true"}
        self.services = [
            Gunicorn("plain", env, WORKERS, folder / "plain"),
            Gunicorn("rotating", rotating, WORKERS, folder / "rotating"),
        ]
        self.proxies = {
            service.name: Nginx(service.name, [service.port], folder / f"nginx-{service.name}")
            for service in self.services
        }
        self.ledger = Ledger()
        self.kills = itertools.count()

    def start(self) -> None:
        if self.redis is not None:
            self.redis.start()
        for service in self.services:
            service.start()
        for proxy in self.proxies.values():
            proxy.start()

    def stop(self) -> None:
        for proxy in self.proxies.values():
            proxy.stop()
        for service in self.services:
            service.close()
        if self.redis is not None:
            self.redis.stop()

    def clients(self, keys: Keys, deadline: float) -> list[Client]:
        """Return the users (a third of them on the rotating service) and the abusers."""
        options, ledger = self.options, self.ledger
        rotating_users = max(1, options.users // 3)
        clients: list[Client] = []
        for number in range(options.users):
            rotating = number < rotating_users
            service = self.services[1 if rotating else 0]
            source = f"127.0.{2 if rotating else 1}.{number + 1}"
            connection = Connection(self.proxies[service.name].port, source, service.name)
            username = "admin" if number == rotating_users else f"{service.name}-user-{number}"
            user = User(
                f"user {number}",
                connection,
                ledger,
                deadline,
                options.rate,
                username=username,
                rotating=rotating,
                keys=keys,
            )
            clients.append(user)
        for number in range(ABUSERS):
            connection = Connection(self.proxies["plain"].port, f"127.0.3.{number + 1}", "plain")
            clients.append(
                Abuser(
                    f"abuser {number}",
                    connection,
                    ledger,
                    deadline,
                    ABUSER_RATE,
                    username=f"abuser-{number}",
                )
            )
        return clients

    def drive(self) -> Outcome:
        from app.auth.keys import secret_key

        self.keys = [secret_key(secret, "soak") for secret in self.secrets]
        current = Keys(self.keys[0])
        origin = time.monotonic()
        deadline = origin + self.schedule.seconds
        clients = self.clients(current, deadline)
        self.current = current
        self.probes = {
            name: Connection(proxy.port, "127.0.0.1", name) for name, proxy in self.proxies.items()
        }
        actions = {
            "kill -9": self.kill,
            "HUP": self.hup,
            "key added": self.key_added,
            "key retired": self.key_retired,
            "store outage": self.store_outage,
            "token lost": self.token_lost,
        }
        self.sampler = Sampler(self.services, origin)
        runner = FaultRunner(self.schedule, origin, actions)
        self.sampler.start()
        for client in clients:
            client.start()
        runner.start()
        for client in clients:
            client.join(max(1.0, deadline - time.monotonic() + 60))
        runner.stopping.set()
        runner.join(120)
        self.sampler.stopping.set()
        self.sampler.join(10)
        for connection in self.probes.values():
            connection.close()
        threads: list[Any] = [*clients, runner, self.sampler]
        errors = [thread.error for thread in threads if thread.error is not None]
        if errors:
            raise RuntimeError(f"the soak's own threads failed: {errors[:3]!r}")
        for service in self.services:
            service.wait_ready(60)
        final = final_checks(self.ledger, self.services)
        states = Counter(record.state for record in self.ledger.tokens)
        outcome = Outcome(
            self.options,
            self.schedule,
            self.ledger.answers,
            final,
            runner.faults,
            self.sampler.samples,
            self.sampler.first_seen,
            dict(states),
            self.ledger.mismatches,
            origin,
        )
        outcome.verdict = checks.judge(outcome)
        return outcome

    # --- the faults: each returns what it did, for the report ---------------------------

    def kill(self) -> str:
        service = self.services[next(self.kills) % 2]
        return f"{service.name}: " + kill_worker(self.sampler.youngest(service))

    def hup(self) -> str:
        before = {service.name: set(service.worker_pids()) for service in self.services}
        for service in self.services:
            service.hup()
        for service in self.services:

            def replaced(service: Gunicorn = service) -> bool:
                pids = set(service.worker_pids())
                return len(pids) == WORKERS and not pids & before[service.name]

            wait_for(replaced, 60, f"{service.name}: workers after HUP")
        return "both services; every worker replaced"

    def restart_all(self, secrets: dict[str, str]) -> None:
        for service in self.services:
            env = {k: v for k, v in service.env.items() if not k.startswith("SIGNING_SECRET")}
            service.restart({**env, **secrets})

    def key_added(self) -> str:
        old, new = self.secrets
        self.restart_all({"SIGNING_SECRET": new, "SIGNING_SECRET_PREVIOUS": old})
        with self.current.lock:
            self.current.current = self.keys[1]
        self.probe_key(self.keys[0], "old key, in its window", (200,))
        return f"new key {self.keys[1].kid} current, {self.keys[0].kid} previous; both restarted"

    def key_retired(self) -> str:
        self.restart_all({"SIGNING_SECRET": self.secrets[1]})
        self.probe_key(self.keys[0], "old key, retired", (401,))
        self.probe_key(self.keys[1], "new key", (200,))
        return f"{self.keys[0].kid} dropped; both restarted"

    def probe_key(self, key: Any, label: str, expected: tuple[int, ...]) -> None:
        """Present a fresh token signed with ``key`` to each service, through its nginx."""
        now = int(time.time())
        token = key.sign({"username": "probe", "role": "user", "iat": now, "exp": now + 60})
        bearer = {"Authorization": f"Bearer {token}"}
        for connection in self.probes.values():
            answer, _ = connection.request(
                label, "GET", "/user-accessible", expected, headers=bearer
            )
            self.ledger.add(answer)

    def store_outage(self) -> str:
        assert self.redis is not None
        self.redis.stop()
        time.sleep(REDIS_DOWN)
        self.redis.start()
        return f"redis-server stopped (TERM), down {REDIS_DOWN:g} s, started again"

    def token_lost(self) -> str:
        """Log a canary in, then remove its refresh token from the store directly."""
        from app.backends import backend_at

        plain = self.services[0]
        connection = Connection(plain.port, "127.0.0.1", plain.name)
        for _ in range(10):  # straight to gunicorn, again if a killed worker had it
            answer, body = connection.request(
                "canary", "POST", "/login", (200,), body={"username": "canary"}
            )
            if answer.status == 200:
                break
        connection.close()
        if answer.status != 200:
            raise RuntimeError(f"the canary could not log in: {answer}")
        self.ledger.given(body["refreshToken"], "canary", plain.name)
        store = backend_at(self.store_url, 5.0).store
        try:
            store.revoke(body["refreshToken"])
        finally:
            store.close()
        return "a canary's refresh token removed from the store behind the service's back"


def final_checks(ledger: Ledger, services: list[Gunicorn], threads: int = 4) -> list[Answer]:
    """Present every token the clients were given to its service, straight to gunicorn
    (nginx's rate limit would refuse thousands from one address; the service exempts
    loopback): kept ones first, since a rotated-away one then revokes its family."""
    final: list[Answer] = []

    def present(records: list, label: str, expected: tuple[int, ...]) -> None:
        connections = {s.name: Connection(s.port, "127.0.0.1", s.name) for s in services}
        for record in records:
            body = {"username": record.username, "refreshToken": record.token}
            connection = connections[record.service]
            final.append(connection.request(label, "POST", "/token", expected, body=body)[0])
        for connection in connections.values():
            connection.close()

    for state, label, expected in FINAL_EXPECTATIONS:
        records = [record for record in ledger.tokens if record.state == state]
        workers = [
            threading.Thread(target=present, args=(records[n::threads], label, expected))
            for n in range(threads)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(600)
    return final
