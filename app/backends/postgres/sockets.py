"""What the sockets of PostgreSQL connections tell, and do, without a round trip.

``alive``: an idle pooled connection the server closed (a restart, pg_terminate_backend)
has something to read, which a poll of its socket sees.

``Watchdog``: libpq waits for an answer as long as the socket stays open, and a server
that stopped answering (frozen, or its host gone without a word) keeps it open. The
server's ``statement_timeout`` cannot help then; this can: one thread per process shuts
the socket of each call still waiting at its deadline, and the call raises NoAnswerError.
"""

from __future__ import annotations

import itertools
import os
import select
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

#: What a call may raise when its socket is shut under it.
FAILURES = (psycopg.Error, OSError)


class NoAnswerError(TimeoutError):
    """The server took longer than the timeout: the watchdog closed the connection."""


class Watchdog:
    """Shuts the socket of each call still running at its deadline (one thread per process)."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._calls: dict[int, tuple[float, int]] = {}  # call -> (deadline, socket)
        self._fired: set[int] = set()
        self._numbers = itertools.count()
        self._thread: threading.Thread | None = None
        self._idle = True  # the thread waits for no deadline: wake it for a new call
        self._stopped = False

    @contextmanager
    def guard(self, connection: psycopg.Connection[Any], deadline: float) -> Iterator[None]:
        """Run the block; if it outlives ``deadline``, its connection is shut, and it
        raises NoAnswerError."""
        call = self.arm(connection, deadline)
        try:
            yield
        except FAILURES as error:
            if self.disarm(call):
                raise NoAnswerError("no answer before the timeout") from error
            raise
        except BaseException:
            self.disarm(call)
            raise
        self.disarm(call)

    def arm(self, connection: psycopg.Connection[Any], deadline: float) -> int:
        """Watch a call on ``connection`` from now; return its number for ``disarm``."""
        call = next(self._numbers)
        with self._condition:
            self._calls[call] = (deadline, connection.pgconn.socket)
            if self._thread is None:
                self._stopped = False
                self._thread = threading.Thread(
                    target=self._run, name="postgres-watchdog", daemon=True
                )
                self._thread.start()
            elif self._idle:
                self._condition.notify()
        return call

    def disarm(self, call: int) -> bool:
        """Stop watching ``call``, once (before its connection can close: its socket is
        not reused); return whether its deadline passed and its socket was shut."""
        with self._condition:
            del self._calls[call]
            if call in self._fired:
                self._fired.discard(call)
                return True
            return False

    def stop(self) -> None:
        """End the thread (a call started later starts it again)."""
        with self._condition:
            self._stopped, thread, self._thread = True, self._thread, None
            self._condition.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join(1)

    def _run(self) -> None:
        with self._condition:
            while not self._stopped:
                now = time.monotonic()
                waiting = []
                for call, (deadline, fileno) in self._calls.items():
                    if call in self._fired:
                        continue
                    if deadline <= now:
                        self._fired.add(call)
                        shut(fileno)
                    else:
                        waiting.append(deadline)
                self._idle = not waiting
                self._condition.wait(min(waiting) - now if waiting else None)


def shut(fileno: int) -> None:
    """Shut a connection's socket (its own descriptor stays open for psycopg to close)."""
    try:
        with socket.socket(fileno=os.dup(fileno)) as duplicate:
            duplicate.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def alive(connection: psycopg.Connection[Any]) -> bool:
    """Return whether an idle pooled connection may be used: open, and nothing to read.

    An idle connection has nothing to read unless the server closed it (or said it
    would): a poll of its socket tells, without a round trip.
    """
    if connection.closed:
        return False
    try:
        readable, _, _ = select.select([connection.pgconn.socket], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return False
    return not readable
