"""One client's keep-alive HTTP connection from a loopback address of its own, and its answers."""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass
from typing import Any

#: The body nginx answers when no gunicorn answered (deploy/nginx/token-service.conf).
NGINX_UNAVAILABLE = "service unavailable, try again shortly"
#: The body the service answers when its token store did not (docs/operations.md).
STORE_UNAVAILABLE = "token store is unavailable, try again shortly"
#: Seconds one request may take, queueing through a restart included.
REQUEST_TIMEOUT = 40.0


@dataclass(frozen=True)
class Answer:
    """One request as a client saw it: what it expected and what came back."""

    started: float  # time.monotonic() when sent
    finished: float
    service: str  # which gunicorn service (through its nginx) the client talks to
    label: str  # what the request was for, e.g. "refresh" or "forged token"
    method: str
    status: int  # 0: no HTTP answer (connection error, timeout)
    expected: tuple[int, ...]
    body: str = ""  # the start of the body of an answer that was not expected
    sent_at: float = 0.0  # time.time() when sent: the clock of the tokens' exp
    valid_until: float | None = None  # the exp of the access token sent, if any

    @property
    def ok(self) -> bool:
        return self.status in self.expected

    @property
    def latency(self) -> float:
        return self.finished - self.started


class Connection:
    """A keep-alive connection to one host, reopened after an error or a ``close``."""

    def __init__(self, port: int, source: str, service: str, timeout: float = REQUEST_TIMEOUT):
        self.port, self.source, self.service, self.timeout = port, source, service, timeout
        self._connection: http.client.HTTPConnection | None = None

    def request(
        self,
        label: str,
        method: str,
        path: str,
        expected: tuple[int, ...],
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        valid_until: float | None = None,
    ) -> tuple[Answer, Any]:
        """Send one request; return its Answer and its JSON body (None if none or not JSON)."""
        sent_headers = dict(headers or {})
        payload = None
        if body is not None:
            payload = json.dumps(body)
            sent_headers["Content-Type"] = "application/json"
        started, sent_at = time.monotonic(), time.time()
        status, data = 0, b""
        try:
            if self._connection is None:
                self._connection = http.client.HTTPConnection(
                    "127.0.0.1", self.port, timeout=self.timeout, source_address=(self.source, 0)
                )
            self._connection.request(method, path, body=payload, headers=sent_headers)
            response = self._connection.getresponse()
            data = response.read()
            status = response.status
            if response.will_close:
                self.close()
        except (OSError, http.client.HTTPException) as error:
            self.close()
            data = repr(error).encode()
        finished = time.monotonic()
        text = "" if status in expected else data[:120].decode("utf-8", "replace")
        answer = Answer(
            started,
            finished,
            self.service,
            label,
            method,
            status,
            expected,
            text,
            sent_at,
            valid_until,
        )
        try:
            parsed = json.loads(data) if data and status else None
        except ValueError:
            parsed = None
        return answer, parsed

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
