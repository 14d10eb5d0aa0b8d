"""One soak on one store: the stack, the clients, the faults, the end checks, the verdict."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.soak import checks
from bench.soak.client import Answer, Connection
from bench.soak.faults import REDIS_DOWN, Fault, FaultRunner, Schedule, kill_worker, new_secret
from bench.soak.sampler import Sample, Sampler
from bench.soak.stack import Gunicorn, Nginx, Redis, base_environment, wait_for
from bench.soak.users import DOUBT, LIVE, REVOKED, ROTATED, Abuser, Keys, Ledger, User

#: Workers per gunicorn: two, so that one lives on while the other is killed.
WORKERS = 2
ABUSERS = 3
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
    faults = set(options.faults)
    if options.store != "redis":
        faults.discard("store")
    schedule = Schedule.of(options.seconds, faults, options.lose_token)
    folder = options.folder
    old_secret, new_secret_value = new_secret(), new_secret()
    redis = Redis(folder / "redis") if options.store == "redis" else None
    env = {
        **base_environment(),
        "INSTANCE_PATH": str(folder / "instance"),
        "SIGNING_SECRET": old_secret,
        "ACCESS_TOKEN_LIFETIME": str(schedule.access_lifetime),
        "TRUSTED_PROXIES": "127.0.0.1/32",  # nginx, as deploy/token-service.env.example
        "LOG_LEVEL": "WARNING",
    }
    if redis is not None:
        env["TOKEN_STORE_URL"] = redis.url
    store_url = (
        redis.url if redis else f"sqlite:///{folder / 'instance' / 'refresh_tokens.sqlite3'}"
    )
    plain = Gunicorn("plain", dict(env), WORKERS, folder / "plain")
    rotating = Gunicorn(
        "rotating", {**env, "REFRESH_TOKEN_ROTATION": "true"}, WORKERS, folder / "rotating"
    )
    services = [plain, rotating]
    proxies = {
        service.name: Nginx(service.name, [service.port], folder / f"nginx-{service.name}")
        for service in services
    }
    try:
        if redis is not None:
            redis.start()
        for service in services:
            service.start()
        for proxy in proxies.values():
            proxy.start()
        return drive(
            options, schedule, services, proxies, redis, store_url, (old_secret, new_secret_value)
        )
    finally:
        for proxy in proxies.values():
            proxy.stop()
        for service in services:
            service.close()
        if redis is not None:
            redis.stop()


def drive(options, schedule, services, proxies, redis, store_url, secrets_pair) -> Outcome:
    from app.keys import secret_key

    old_secret, new_secret_value = secrets_pair
    plain, rotating = services
    old_key, new_key = secret_key(old_secret, "soak"), secret_key(new_secret_value, "soak")
    keys = Keys(old_key)
    ledger = Ledger()
    origin = time.monotonic()
    deadline = origin + schedule.seconds
    clients: list[threading.Thread] = []
    rotating_users = max(1, options.users // 3)
    for number in range(options.users):
        is_rotating = number < rotating_users
        service = rotating if is_rotating else plain
        source = f"127.0.{2 if is_rotating else 1}.{number + 1}"
        username = "admin" if number == rotating_users else f"{service.name}-user-{number}"
        connection = Connection(proxies[service.name].port, source, service.name)
        clients.append(
            User(
                f"user {number}",
                connection,
                ledger,
                deadline,
                options.rate,
                username=username,
                rotating=is_rotating,
                keys=keys,
            )
        )
    for number in range(ABUSERS):
        connection = Connection(proxies["plain"].port, f"127.0.3.{number + 1}", "plain")
        clients.append(
            Abuser(
                f"abuser {number}", connection, ledger, deadline, 0.2, username=f"abuser-{number}"
            )
        )
    probe = {name: Connection(proxy.port, "127.0.0.1", name) for name, proxy in proxies.items()}

    def probe_key(key, label: str, expected: tuple[int, ...]) -> None:
        now = int(time.time())
        token = key.sign({"username": "probe", "role": "user", "iat": now, "exp": now + 60})
        for connection in probe.values():
            answer, _ = connection.request(
                label,
                "GET",
                "/user-accessible",
                expected,
                headers={"Authorization": f"Bearer {token}"},
            )
            ledger.add(answer)

    kills = iter(range(10_000))

    def kill() -> str:
        service = services[next(kills) % 2]
        return f"{service.name}: " + kill_worker(sampler.youngest(service))

    def hup() -> str:
        before = {service.name: set(service.worker_pids()) for service in services}
        for service in services:
            service.hup()
        for service in services:

            def replaced(service=service) -> bool:
                pids = set(service.worker_pids())
                return len(pids) == WORKERS and not pids & before[service.name]

            wait_for(replaced, 60, f"{service.name}: workers after HUP")
        return "both services; every worker replaced"

    def restart_all(extra: dict[str, str]) -> None:
        for service in services:
            env = {k: v for k, v in service.env.items() if not k.startswith("SIGNING_SECRET")}
            service.restart({**env, **extra})

    def key_added() -> str:
        restart_all({"SIGNING_SECRET": new_secret_value, "SIGNING_SECRET_PREVIOUS": old_secret})
        with keys.lock:
            keys.current = new_key
        probe_key(old_key, "old key, in its window", (200,))
        return f"new key {new_key.kid} current, {old_key.kid} previous; both restarted"

    def key_retired() -> str:
        restart_all({"SIGNING_SECRET": new_secret_value})
        probe_key(old_key, "old key, retired", (401,))
        probe_key(new_key, "new key", (200,))
        return f"{old_key.kid} dropped; both restarted"

    def store_outage() -> str:
        redis.stop()
        time.sleep(REDIS_DOWN)
        redis.start()
        return f"redis-server stopped (TERM), down {REDIS_DOWN:g} s, started again"

    def token_lost() -> str:
        from app.store import open_store

        answer, body = probe["plain"].request(
            "canary", "POST", "/login", (200,), body={"username": "canary"}
        )
        ledger.add(answer)
        if answer.status != 200:
            return "no canary token"
        ledger.given(body["refreshToken"], "canary", "plain")
        store = open_store(store_url, 5.0)
        try:
            store.revoke(body["refreshToken"])
        finally:
            store.close()
        return "a canary's refresh token removed from the store behind the service's back"

    actions = {
        "kill -9": kill,
        "HUP": hup,
        "key added": key_added,
        "key retired": key_retired,
        "store outage": store_outage,
        "token lost": token_lost,
    }
    sampler = Sampler(services, origin)
    runner = FaultRunner(schedule, origin, actions)
    sampler.start()
    for client in clients:
        client.start()
    runner.start()
    for client in clients:
        client.join(max(1.0, deadline - time.monotonic() + 60))
    runner.stopping.set()
    runner.join(120)
    sampler.stopping.set()
    sampler.join(10)
    for connection in probe.values():
        connection.close()
    errors = [t.error for t in [*clients, runner, sampler] if getattr(t, "error", None)]
    if errors:
        raise RuntimeError(f"the soak's own threads failed: {errors[:3]!r}")
    for service in services:
        service.wait_ready(60)
    final = final_checks(ledger, services)
    counts: dict[str, int] = {}
    for record in ledger.tokens:
        counts[record.state] = counts.get(record.state, 0) + 1
    outcome = Outcome(
        options,
        schedule,
        ledger.answers,
        final,
        runner.faults,
        sampler.samples,
        sampler.first_seen,
        counts,
        ledger.mismatches,
        origin,
    )
    outcome.verdict = checks.judge(outcome)
    return outcome


def final_checks(ledger: Ledger, services: list[Gunicorn], threads: int = 4) -> list[Answer]:
    """Present every token the clients were given to its service, straight to gunicorn
    (nginx's rate limit would refuse thousands from one address; the service exempts
    loopback): kept ones first, since a rotated-away one then revokes its family."""
    by_name = {service.name: service for service in services}
    final: list[Answer] = []
    for state, label, expected in FINAL_EXPECTATIONS:
        records = [record for record in ledger.tokens if record.state == state]

        def check(part: list, label=label, expected=expected) -> None:
            connections = {
                name: Connection(s.port, "127.0.0.1", name) for name, s in by_name.items()
            }
            for record in part:
                answer, _ = connections[record.service].request(
                    label,
                    "POST",
                    "/token",
                    expected,
                    body={"username": record.username, "refreshToken": record.token},
                )
                final.append(answer)
            for connection in connections.values():
                connection.close()

        workers = [
            threading.Thread(target=check, args=(records[n::threads],)) for n in range(threads)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(600)
    return final


__all__ = ["DOUBT", "Options", "Outcome", "soak"]
