"""The soak's clients: users of the service, clients over the rate limit, and their tokens.

Each client is a thread with one keep-alive connection to an nginx, from a loopback
address of its own (nginx counts its rate limit per address, and forwards the address).
Every refresh token a client is given goes into the ledger with what the client did
with it, so that the end of the run can check each against what the service promised.
"""

from __future__ import annotations

import random
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tests.system.soak.client import Answer, Connection

LIVE, REVOKED, ROTATED, DOUBT, REFUSED = "live", "revoked", "rotated", "in doubt", "refused"
#: An access token is used only while it has at least this many seconds left.
ACCESS_MARGIN = 2.0
#: Live refresh tokens a user keeps; one more login revokes the oldest.
TOKENS_KEPT = 4
JSON_ERRORS = (500, 502, 503, 504, 0)


@dataclass
class RefreshToken:
    token: str
    username: str
    service: str
    family: str
    state: str = LIVE


@dataclass
class Keys:
    """The signing keys the harness set, for the clients' forged and expired tokens."""

    current: Any  # app.auth.keys.SigningKey
    lock: threading.Lock = field(default_factory=threading.Lock)


class Ledger:
    """Every answer of the run and every refresh token given out, shared by the clients."""

    def __init__(self) -> None:
        self.answers: list[Answer] = []
        self.tokens: list[RefreshToken] = []
        self.mismatches: list[str] = []
        self.lock = threading.Lock()

    def add(self, answer: Answer) -> None:
        self.answers.append(answer)  # list.append is atomic

    def given(self, token: str, username: str, service: str, family: str = "") -> RefreshToken:
        record = RefreshToken(token, username, service, family or token)
        with self.lock:
            self.tokens.append(record)
        return record


class Client(threading.Thread):
    """A thread that sends requests until its deadline, at most ``rate`` a second."""

    def __init__(
        self, name: str, connection: Connection, ledger: Ledger, deadline: float, rate: float
    ):
        super().__init__(name=name, daemon=True)
        self.connection, self.ledger, self.deadline, self.rate = connection, ledger, deadline, rate
        self.random = random.Random(name)
        self.error: BaseException | None = None
        self.stopping = threading.Event()

    def call(self, label: str, method: str, path: str, expected: tuple[int, ...], **kwargs: Any):
        answer, body = self.connection.request(label, method, path, expected, **kwargs)
        self.ledger.add(answer)
        return answer, body

    def run(self) -> None:
        try:
            next_at = time.monotonic()
            for _ in range(int(self.rate * (self.deadline - next_at)) + 10):  # bounded
                if time.monotonic() >= self.deadline:
                    break
                self.step()
                # never a burst to catch up after a slow answer: at most `rate` a second,
                # as a real client (nginx limits /login and /token to 5 a second per address)
                next_at = max(next_at + 1 / self.rate, time.monotonic())
                if self.stopping.wait(max(0.0, min(next_at, self.deadline) - time.monotonic())):
                    break
        except BaseException as error:  # reported by the run, not lost with the thread
            self.error = error
        finally:
            self.connection.close()

    def step(self) -> None:
        raise NotImplementedError


class User(Client):
    """A user: logs in, refreshes (rotating or not), revokes, calls the protected endpoints,
    and now and then presents a forged, expired, revoked or rotated-away token."""

    ACTIONS = (
        ("user-accessible", 30),
        ("admin-accessible", 5),
        ("reservation", 20),
        ("login", 4),
        ("refresh", 8),
        ("revoke", 3),
        ("present revoked", 2),
        ("forged token", 4),
    )

    def __init__(self, *args: Any, username: str, rotating: bool, keys: Keys, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.username, self.rotating, self.keys = username, rotating, keys
        self.access: str | None = None
        self.access_expires = 0.0
        self.live: list[RefreshToken] = []
        self.retired: list[RefreshToken] = []
        self.names = [name for name, _ in self.ACTIONS]
        self.weights = [weight for _, weight in self.ACTIONS]
        if rotating:
            self.names.append("present rotated")
            self.weights.append(2)

    def step(self) -> None:
        if self.access is None or self.access_expires - time.time() < ACCESS_MARGIN:
            self.renew_access()
            return
        action = self.random.choices(self.names, self.weights)[0]
        getattr(self, "do_" + action.replace(" ", "_").replace("-", "_"))()

    # --- tokens ---------------------------------------------------------------------

    def take_access(self, token: str) -> None:
        import jwt  # the claims are read unverified: the client's own bookkeeping

        self.access = token
        self.access_expires = float(jwt.decode(token, options={"verify_signature": False})["exp"])

    def renew_access(self) -> None:
        if self.live:
            self.do_refresh(self.live[-1])
        else:
            self.do_login()

    def do_login(self) -> None:
        answer, body = self.call(
            "login", "POST", "/login", (200,), body={"username": self.username}
        )
        if answer.status == 200:
            record = self.ledger.given(body["refreshToken"], self.username, self.connection.service)
            self.live.append(record)
            self.take_access(body["accessToken"])
            if len(self.live) > TOKENS_KEPT:
                self.revoke(self.live[0])
        elif answer.status in JSON_ERRORS:
            time.sleep(0.2)

    def do_refresh(self, record: RefreshToken | None = None) -> None:
        if record is None:
            if not self.live:
                return self.do_login()
            record = self.random.choice(self.live)
        answer, body = self.call(
            "refresh",
            "POST",
            "/token",
            (200,),
            body={"username": self.username, "refreshToken": record.token},
        )
        if answer.status == 200:
            self.take_access(body["accessToken"])
            if self.rotating:
                self.retire(record, ROTATED)
                successor = self.ledger.given(
                    body["refreshToken"], self.username, self.connection.service, record.family
                )
                self.live.append(successor)
        elif answer.status == 401:
            self.retire(record, REFUSED)  # a promise broken: the answer is the failure
        elif answer.status in JSON_ERRORS:
            if self.rotating:  # the rotation may have happened, its answer lost
                self.retire(record, DOUBT)
            time.sleep(0.2)
        return None

    def do_revoke(self) -> None:
        if self.live:
            self.revoke(self.random.choice(self.live))

    def revoke(self, record: RefreshToken) -> None:
        answer, _ = self.call("revoke", "DELETE", f"/token/{record.token}", (204,))
        self.retire(record, REVOKED if answer.status == 204 else DOUBT)

    def retire(self, record: RefreshToken, state: str) -> None:
        record.state = state
        if record in self.live:
            self.live.remove(record)
        self.retired.append(record)
        if state == DOUBT:  # a rotation in doubt leaves its whole family in doubt
            for other in [r for r in self.live if r.family == record.family]:
                other.state = DOUBT
                self.live.remove(other)

    def do_present_revoked(self) -> None:
        revoked = [record for record in self.retired if record.state == REVOKED]
        if revoked:
            record = self.random.choice(revoked[-20:])
            self.call(
                "present revoked",
                "POST",
                "/token",
                (401,),
                body={"username": self.username, "refreshToken": record.token},
            )

    def do_present_rotated(self) -> None:
        """Present a rotated-away token: reuse, so the service revokes its whole family."""
        rotated = [record for record in self.retired if record.state == ROTATED]
        if not rotated:
            return
        record = self.random.choice(rotated[-20:])
        answer, _ = self.call(
            "present rotated",
            "POST",
            "/token",
            (401,),
            body={"username": self.username, "refreshToken": record.token},
        )
        family = [r for r in self.live if r.family == record.family]
        for other in family:  # the family is revoked (401), or nothing is known any more
            self.retire(other, REVOKED if answer.status == 401 else DOUBT)

    # --- protected endpoints ---------------------------------------------------------

    def bearer(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.access}"}

    def do_user_accessible(self) -> None:
        self.call(
            "protected GET",
            "GET",
            "/user-accessible",
            (200,),
            headers=self.bearer(),
            valid_until=self.access_expires,
        )

    def do_admin_accessible(self) -> None:
        expected = (200,) if self.username == "admin" else (403,)
        self.call(
            "protected GET",
            "GET",
            "/admin-accessible",
            expected,
            headers=self.bearer(),
            valid_until=self.access_expires,
        )

    def do_reservation(self) -> None:
        guests = self.random.randint(1, 12)
        answer, body = self.call(
            "protected POST",
            "POST",
            "/restaurant-reservation",
            (200,),
            body={"guestsCount": guests},
            headers=self.bearer(),
            valid_until=self.access_expires,
        )
        if answer.status == 200 and (body or {}).get("guestsCount") != guests:
            self.ledger.mismatches.append(f"reservation of {guests} echoed {body!r}")

    def do_forged_token(self) -> None:
        now = int(time.time())
        claims = {"username": self.username, "role": "admin", "iat": now, "exp": now + 60}
        kind = self.random.randrange(4)
        with self.keys.lock:
            key = self.keys.current
        if kind == 0:  # the service's kid, another secret
            from app.auth.keys import secret_key

            token = secret_key(secrets.token_urlsafe(48), "forger").sign(claims)
            token = key.header + "." + token.partition(".")[2]
        elif kind == 1:  # the service's own key, expired
            token = key.sign({**claims, "role": "user", "iat": now - 120, "exp": now - 1})
        elif kind == 2:  # alg none
            token = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + key.sign(claims).split(".")[1] + "."
        else:
            token = secrets.token_urlsafe(40)
        label = "expired token" if kind == 1 else "forged token"
        self.call(
            label, "GET", "/user-accessible", (401,), headers={"Authorization": f"Bearer {token}"}
        )


class Abuser(Client):
    """A client over the rate limit: bursts of logins, far faster than nginx's 5 a second
    (``BURST`` at once, twice a second on average when run at a ``rate`` of 0.5)."""

    BURST = 40

    def __init__(self, *args: Any, username: str, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.username = username

    def step(self) -> None:
        for _ in range(self.BURST):
            answer, body = self.call(
                "over the rate limit",
                "POST",
                "/login",
                (200, 429),
                body={"username": self.username},
            )
            if answer.status == 200:
                self.ledger.given(body["refreshToken"], self.username, self.connection.service)
            if time.monotonic() >= self.deadline:
                return
