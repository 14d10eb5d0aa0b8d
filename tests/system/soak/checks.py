"""The soak's verdict: every promise checked by a rule, nothing left to judgement.

- No answer is 5xx (or missing), except a 503 of two kinds: the service's "token store
  is unavailable" to a request in flight during the store's outage or ``OUTAGE_TAIL``
  after it, and nginx's "service unavailable" (or an answer cut off after its head) to a
  request in flight when a worker was killed with ``kill -9`` (sent before the kill or
  within ``KILL_REACH`` after it, answered after it): what the dead worker held is lost,
  and nginx rightly passes no POST it had sent on to another worker.
- No valid access token is refused: every protected request a client sent with a token
  of at least 2 s left (users.py) is answered 200 (403 for the admin-only endpoint), the
  old key's tokens within its window included, unless the token expired before the
  answer came back (a request queued through a restart): the service may have checked
  it expired.
- Forged, expired, revoked and rotated-away tokens are refused when presented, during
  the run and at its end; every refresh token a client kept still refreshes at the end.
- Worker RSS grows less than ``RSS_LIMIT`` from the end of the warm-up to the last
  reading, the open files that are not sockets do not grow at all, and sockets stay
  within ``SOCKET_SLACK`` of their first quarter's most, for every worker that lived at
  least ``JUDGED_SPAN`` of the run past its warm-up.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tests.system.soak.client import NGINX_UNAVAILABLE, STORE_UNAVAILABLE, Answer

if TYPE_CHECKING:
    from tests.system.soak.run import Outcome
    from tests.system.soak.sampler import Sample

#: Seconds after a kill -9 in which a request sent may still reach the dead worker.
KILL_REACH = 0.5
#: Seconds after the store is back in which its 503s are still the outage's.
OUTAGE_TAIL = 3.0
RSS_LIMIT = 0.10
#: A worker is judged on memory when it lived this share of the run past its warm-up.
JUDGED_SPAN = 0.2
#: Connections (sockets) a worker may hold beyond its warm-up's most: nginx's keepalive.
SOCKET_SLACK = 16
PROTECTED = ("protected GET", "protected POST", "old key, in its window", "new key")
REFUSALS = (
    "forged token",
    "expired token",
    "present revoked",
    "present rotated",
    "old key, retired",
)
STORE_CALLS = (
    "login",
    "refresh",
    "revoke",
    "present revoked",
    "present rotated",
    "over the rate limit",
    "canary",
)


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


def excuse(answer: Answer, outcome: Outcome) -> str | None:
    """Return why an unexpected answer is allowed, or None if it is not."""
    if answer.status == 401 and answer.valid_until is not None:
        # sent with 2 s left, the token expired before its answer came back (queued
        # through a restart): the service may have checked it expired; not a valid one
        if answer.valid_until <= answer.sent_at + answer.latency:
            return "expired in flight"
        return None
    if answer.status not in (503, 0):
        return None
    started, finished = answer.started - outcome.origin, answer.finished - outcome.origin
    for fault in outcome.faults:
        if (
            fault.kind == "store outage"
            and answer.status == 503
            and STORE_UNAVAILABLE in answer.body
            and answer.label in STORE_CALLS
            and finished >= fault.at  # in flight when the store went, or sent after
            and started <= (fault.until or fault.at) + OUTAGE_TAIL
        ):
            return "store outage"
        if (
            fault.kind == "kill -9"
            # nginx's 503; or, if nginx had passed the answer's head on already, the
            # answer cut off (no status): either way, the dead worker's answer is lost
            and (NGINX_UNAVAILABLE in answer.body or answer.status == 0)
            and started <= fault.at + KILL_REACH
            and finished >= fault.at
        ):
            return "kill -9"
    return None


def summary(answers: list[Answer], limit: int = 8) -> str:
    counts = Counter(f"{a.label} {a.method} -> {a.status}" for a in answers)
    shown = ", ".join(f"{what}: {count}" for what, count in counts.most_common(limit))
    return shown + (" ..." if len(counts) > limit else "")


def judge(outcome: Outcome) -> list[Check]:
    """Return every check of the run, passed or not."""
    unexpected = [answer for answer in outcome.answers if not answer.ok]
    excused = [answer for answer in unexpected if excuse(answer, outcome)]
    failed = [answer for answer in unexpected if not excuse(answer, outcome)]
    server_errors = [a for a in failed if a.status >= 500 or a.status == 0]
    refused_valid = [a for a in failed if a.label in PROTECTED and a.status in (401, 403)]
    accepted_bad = [a for a in failed if a.label in REFUSALS and 200 <= a.status < 300]
    others = [a for a in failed if a not in server_errors + refused_valid + accepted_bad]
    by_excuse = Counter(excuse(answer, outcome) for answer in excused)
    lost = [a for a in outcome.final if a.label == "kept token" and not a.ok]
    revived = [a for a in outcome.final if a.label != "kept token" and not a.ok]
    counts = Counter(answer.label for answer in outcome.final)
    return [
        Check(
            "No 5xx but the allowed 503s",
            not server_errors,
            f"{len(server_errors)} not allowed ({summary(server_errors)}); allowed: "
            + (", ".join(f"{n} at {why}" for why, n in by_excuse.items()) or "none"),
        ),
        Check(
            "No valid access token refused (key rotation included)",
            not refused_valid,
            f"{len(refused_valid)} refused ({summary(refused_valid)})",
        ),
        Check(
            "Forged, expired, revoked and rotated-away tokens refused during the run",
            not accepted_bad,
            f"{len(accepted_bad)} accepted ({summary(accepted_bad)})",
        ),
        Check(
            "Every other answer as expected",
            not others and not outcome.mismatches,
            f"{len(others)} unexpected ({summary(others)}); "
            f"{len(outcome.mismatches)} wrong bodies {outcome.mismatches[:3]}",
        ),
        Check(
            "Every refresh token kept still refreshes at the end",
            not lost,
            f"{counts['kept token'] - len(lost)} of {counts['kept token']} refresh "
            f"({summary(lost)})",
        ),
        Check(
            "Every revoked or rotated-away token refused at the end",
            not revived,
            f"{counts['revoked token']} revoked, {counts['rotated token']} rotated away; "
            f"{len(revived)} accepted ({summary(revived)})",
        ),
        rate_limit_check(outcome.answers),
        *memory_checks(outcome),
    ]


def rate_limit_check(answers: list[Answer]) -> Check:
    over = Counter(a.status for a in answers if a.label == "over the rate limit")
    users_limited = sum(1 for a in answers if a.status == 429 and a.label != "over the rate limit")
    return Check(
        "The rate limit refuses the clients over it, and only them",
        over[429] > 0 and users_limited == 0,
        f"clients over it: {over[200]} answered, {over[429]} refused (429); "
        f"users refused: {users_limited}",
    )


def lives(outcome: Outcome) -> dict[tuple[str, int], list[Sample]]:
    """Return each worker's samples, by (service, PID), in time order."""
    found: dict[tuple[str, int], list[Sample]] = {}
    for sample in outcome.samples:
        found.setdefault((sample.service, sample.pid), []).append(sample)
    return found


def judged_workers(outcome: Outcome) -> dict[tuple[str, int], tuple[Sample, Sample, list[Sample]]]:
    """Return, per worker that lived long enough, its first sample past its warm-up, its
    last sample, and its samples past the warm-up."""
    warmup, span = outcome.schedule.warmup, outcome.schedule.seconds * JUDGED_SPAN
    judged = {}
    for key, samples in lives(outcome).items():
        born = outcome.first_seen.get(key[1], samples[0].at)
        warm = [s for s in samples if s.at >= born + warmup]
        if warm and warm[-1].at - warm[0].at >= span:
            judged[key] = (warm[0], warm[-1], warm)
    return judged


def memory_checks(outcome: Outcome) -> list[Check]:
    judged = judged_workers(outcome)
    services = sorted({sample.service for sample in outcome.samples})
    unjudged = [name for name in services if not any(key[0] == name for key in judged)]
    growths, fd_problems = [], []
    for (service, pid), (first, last, warm) in sorted(judged.items()):
        growth = last.rss_kib / first.rss_kib - 1
        growths.append(
            (growth, f"{service} {pid}: {first.rss_kib} -> {last.rss_kib} KiB ({growth:+.1%})")
        )
        sockets_first = max(s.fds - s.other_fds for s in warm[: max(1, len(warm) // 4)])
        if (
            last.other_fds > first.other_fds
            or last.fds - last.other_fds > sockets_first + SOCKET_SLACK
        ):
            fd_problems.append(
                f"{service} {pid}: files {first.other_fds} -> {last.other_fds}, "
                f"sockets {sockets_first} -> {last.fds - last.other_fds}"
            )
    too_much = [text for growth, text in growths if growth >= RSS_LIMIT]
    shown = "; ".join(text for _, text in growths)
    return [
        Check(
            f"Worker RSS grows less than {RSS_LIMIT:.0%} after warm-up",
            bool(judged) and not too_much and not unjudged,
            (f"no worker of {', '.join(unjudged)} lived long enough to judge; " if unjudged else "")
            + (shown or "no worker judged"),
        ),
        Check(
            "Open files flat (sockets within nginx's keepalive)",
            bool(judged) and not fd_problems,
            "; ".join(fd_problems) or f"{len(judged)} workers flat",
        ),
    ]
