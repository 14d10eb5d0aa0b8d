"""Prometheus metrics: counted on the request path, served at ``GET /metrics``.

Under gunicorn every worker counts into files of its own in one folder, which
gunicorn.conf.py creates fresh at each start and hands over in the
``PROMETHEUS_MULTIPROC_DIR`` variable; a scrape, answered by any worker, adds up
every worker's files, and the merged files into which the master adds those of workers
that have exited (metrics_scrape.py), so no count is lost when a worker is replaced.
Outside gunicorn (tests, ``flask`` commands) the counts live in the process.

prometheus_client picks its mode once, when it is first imported, from that
variable: so it is imported here only when an app is built (in a worker, after
gunicorn's master has set the variable), never when the ``app`` package is.

What is counted comes from the request log's notes (app/http/request_log.py): the
route rule (never the raw path), the status, the duration, why a request was
refused, which token event it was. Nothing else on the request path touches it.

A request only adds to plain counts in the process, and its duration to a list;
they reach prometheus_client every FLUSH_SECONDS, from a thread of each worker, and
before each scrape and at exit, so the request path never writes to the shared files.
A scrape may so miss up to FLUSH_SECONDS of another worker's requests, and a worker
killed with -9 loses its last FLUSH_SECONDS of counts.

The ``/metrics`` answer and the multiprocess folder are app/observability/metrics_scrape.py.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from typing import Any

from flask import Flask
from werkzeug.routing import Rule

from app.compat.prometheus import count_in_process_memory
from app.compat.werkzeug import ServiceRequest
from app.config.settings import Settings
from app.events import AUTH_FAILURE_REASONS, Event
from app.extensions import METRICS
from app.observability.metric_files import FOLDER_VARIABLE, reserve_metric_files, scrape_lock

#: The environ key under which the route rule of a request waits for the metrics.
RULE_KEY = "token_service.rule"
#: Seconds: fine steps for answers that wait on nothing but the process and a local file,
#: up to 2.5 s, past TOKEN_STORE_TIMEOUT's default (2 s), for a store that does not answer.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
#: Methods counted by name; any other is ``other``, so a client cannot mint label values.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: Requests no route matched (404, 405): one label value, whatever the path.
UNMATCHED = "unmatched"
#: The token counter's ``event`` label values.
TOKEN_EVENTS = ("issued", "refreshed", "revoked")
#: What each security event adds to the token counter. Every event is listed, so that a
#: new one is counted by decision, not forgotten (tests/api/test_metrics.py checks it).
TOKEN_EVENT_OF: dict[str, str | None] = {
    Event.LOGIN: "issued",
    Event.REFRESH: "refreshed",
    Event.REFRESH_TOKEN_RETRY: "refreshed",
    Event.REVOKE: None,  # "revoked" only when the token was known: the ``revoked`` note
    Event.LOGOUT: None,  # a cookie token denied: no refresh token issued or revoked
    Event.LOGIN_FAILED: None,
    Event.LOGIN_LIMITED: None,
    Event.REFRESH_FAILED: None,
    Event.REFRESH_TOKEN_REUSE: None,  # a family revoked, not a token presented
    Event.RATE_LIMITED: None,
    Event.USER_ADDED: None,  # the operator commands' events: no request, nothing to count
    Event.USER_PASSWORD_CHANGED: None,
    Event.USER_REMOVED: None,
    Event.SESSION_ENDED: "revoked",  # one session's tokens, as a logout's
    Event.LOGGED_OUT_EVERYWHERE: None,  # any number of sessions, maybe none
}
#: The status of a request refused by a rate limit.
TOO_MANY_REQUESTS = 429
#: Seconds between two flushes of a worker's counts into the shared files.
FLUSH_SECONDS = 1.0


class Metrics:
    """The service's metrics, and ``observe``, which the request log calls once a request."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram, values

        self.multiprocess = values.ValueClass is not values.MutexValue
        # In-process counts are kept per app (tests build many); files need no registry.
        self.registry = None if self.multiprocess else CollectorRegistry()
        registry = self.registry
        self.requests = Counter(
            "token_service_http_requests",
            "Requests answered, by route rule, method and status.",
            ("endpoint", "method", "status"),
            registry=registry,
        )
        self.latency = Histogram(
            "token_service_http_request_duration_seconds",
            "Time taken to answer a request, by route rule.",
            ("endpoint",),
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.tokens = Counter(
            "token_service_tokens",
            "Token events: issued (login), refreshed (POST /token), revoked (a known token).",
            ("event",),
            registry=registry,
        )
        self.auth_failures = Counter(
            "token_service_auth_failures",
            "Requests refused as unauthenticated (401) or forbidden (403), by reason.",
            ("reason",),
            registry=registry,
        )
        self.store_errors = Counter(
            "token_service_store_errors",
            "Requests answered 503 because the refresh-token store did not answer.",
            registry=registry,
        )
        self.rate_limited = Counter(
            "token_service_rate_limited",
            "Requests refused by a rate limit (answered 429).",
            registry=registry,
        )
        self.rate_limit_errors = Counter(
            "token_service_rate_limit_errors",
            "Requests whose rate-limit counters did not answer: let through unchecked"
            " (RATE_LIMIT_AUTH), or refused with 503 (LOGIN_FAILURE_LIMIT).",
            registry=registry,
        )
        # Label values known in advance are exported from the start, at 0.
        for event in TOKEN_EVENTS:
            self.tokens.labels(event)
        for reason in AUTH_FAILURE_REASONS:
            self.auth_failures.labels(reason)
        self._lock = threading.Lock()
        self._pending = _Pending()
        self._children: dict[Any, Any] = {}
        if self.multiprocess:  # an app is built in each worker, after the fork
            threading.Thread(target=self._flush_forever, name="metrics", daemon=True).start()
            atexit.register(self.flush)

    def observe(
        self, environ: dict[str, Any], status: int, seconds: float, notes: dict[str, str]
    ) -> None:
        """Count one answered request (called by the request log, after the app answered)."""
        rule = environ.get(RULE_KEY)
        endpoint = rule.rule if rule is not None else UNMATCHED
        method = environ["REQUEST_METHOD"]
        if method not in KNOWN_METHODS:
            method = "other"
        with self._lock:
            pending = self._pending
            key = (endpoint, method, status)
            pending.requests[key] = pending.requests.get(key, 0) + 1
            durations = pending.latency.get(endpoint)
            if durations is None:
                pending.latency[endpoint] = [seconds]
            else:
                durations.append(seconds)
            if notes:
                reason = notes.get("reason")
                if reason is not None and status in (401, 403):  # not a 429's reason
                    pending.auth_failures[reason] = pending.auth_failures.get(reason, 0) + 1
                event = TOKEN_EVENT_OF.get(notes.get("event", ""))
                if event is None and "revoked" in notes:  # a known token, revoked
                    event = "revoked"
                if event is not None:
                    pending.tokens[event] = pending.tokens.get(event, 0) + 1
                if "store_error" in notes:
                    pending.store_errors += 1
                if "rate_limit_error" in notes:
                    pending.rate_limit_errors += 1
            if status == TOO_MANY_REQUESTS:
                pending.rate_limited += 1

    def flush(self) -> None:
        """Hand the counts gathered since the last flush to prometheus_client."""
        with self._lock:
            pending, self._pending = self._pending, _Pending()
        for (endpoint, method, status), count in pending.requests.items():
            self._child(self.requests, endpoint, method, str(status)).inc(count)
        for endpoint, durations in pending.latency.items():
            histogram = self._child(self.latency, endpoint)
            for seconds in durations:
                histogram.observe(seconds)
        for reason, count in pending.auth_failures.items():
            self._child(self.auth_failures, reason).inc(count)
        for event, count in pending.tokens.items():
            self._child(self.tokens, event).inc(count)
        if pending.store_errors:
            self.store_errors.inc(pending.store_errors)
        if pending.rate_limited:
            self.rate_limited.inc(pending.rate_limited)
        if pending.rate_limit_errors:
            self.rate_limit_errors.inc(pending.rate_limit_errors)

    def _child(self, metric: Any, *labels: str) -> Any:
        child = self._children.get((metric, labels))
        if child is None:  # labels() takes a lock and builds a key: once per combination
            child = self._children[(metric, labels)] = metric.labels(*labels)
        return child

    def _flush_forever(self) -> None:
        while True:
            time.sleep(FLUSH_SECONDS)
            try:
                self.flush()
            except Exception:  # a full disk, say: that second's counts are lost, not the next
                logging.getLogger(__name__).exception("metrics: flush failed")

    def exposition(self) -> bytes:
        """Return every count in Prometheus's text format, all workers' added up."""
        from prometheus_client import CollectorRegistry, generate_latest, multiprocess

        self.flush()  # this worker's counts are current; the others' at most FLUSH_SECONDS old
        if self.registry is not None:
            return generate_latest(self.registry)
        folder = os.environ[FOLDER_VARIABLE]
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, folder)
        with scrape_lock(folder):  # no exited worker's files merged while they are read
            return generate_latest(registry)


class _Pending:
    """Counts gathered since the last flush."""

    __slots__ = (
        "auth_failures",
        "latency",
        "rate_limit_errors",
        "rate_limited",
        "requests",
        "store_errors",
        "tokens",
    )

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, int], int] = {}
        #: endpoint -> the durations of its requests, in seconds (one second's worth)
        self.latency: dict[str, list[float]] = {}
        self.auth_failures: dict[str, int] = {}
        self.tokens: dict[str, int] = {}
        self.store_errors = 0
        self.rate_limited = 0
        self.rate_limit_errors = 0


def init_metrics(app: Flask, settings: Settings) -> None:
    """Attach the metrics to ``app`` when METRICS is on, and have each request keep its rule.

    ``app.request_class`` becomes ``RuleInEnvironRequest``: the one change to the
    service's request that the metrics make. With METRICS off nothing changes.
    """
    if not settings.metrics:
        app.extensions[METRICS] = None
        return
    folder = os.environ.get(FOLDER_VARIABLE)
    if folder:  # a gunicorn worker: its files, allocated before prometheus_client maps them
        try:
            reserve_metric_files(folder, os.getpid())
        except OSError as error:
            logging.getLogger(__name__).warning(
                "metrics: this worker's files cannot be allocated in %s (%s): it counts in"
                " its own memory, left out of the other workers' /metrics",
                folder,
                error,
            )
            count_in_process_memory()
    app.extensions[METRICS] = Metrics()
    app.request_class = RuleInEnvironRequest


class RuleInEnvironRequest(ServiceRequest):
    """The service's request, keeping the rule Flask matched in the environ, where the
    metrics find it once the app has answered, with no hook run on every request."""

    @property
    def url_rule(self) -> Rule | None:
        rule: Rule | None = self.environ.get(RULE_KEY)
        return rule

    @url_rule.setter
    def url_rule(self, rule: Rule | None) -> None:
        self.environ[RULE_KEY] = rule
