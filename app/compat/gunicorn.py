"""What the service relies on in gunicorn beyond its public API.

The gthread worker's accept switch, wrapped so that a stopping worker refuses new
connections at once; its quick shutdown (QUIT), replaced so that Ctrl-C never hangs.

tests/unit/test_compat.py checks each assumption against the installed release.
"""

from __future__ import annotations

import os
import signal
from typing import Any

#: The distribution and the release (major.minor) whose internals were checked.
DISTRIBUTION = "gunicorn"
CHECKED_VERSION = "27.0"


def refuse_new_connections_when_stopping(worker: Any) -> None:
    """Make a stopping gthread ``worker`` take what waits in its listen queue, then close
    its copy of the listening socket.

    gthread leaves new connections in the queue until the worker exits, and the kernel
    then resets them after nginx has sent a request on them, which nginx may not pass
    on if it is a POST. Refused instead, nginx passes any request to the next server of
    its upstream, since nothing was sent. A HUP's new workers and the master keep the
    port open: only the worker's own copy closes.
    """
    enable_accept = getattr(worker, "set_accept_enabled", None)
    if enable_accept is None:  # not a gthread worker
        return

    def set_accept_enabled(enabled: bool) -> None:
        enable_accept(enabled)
        if enabled or worker.alive:
            return
        for listener in worker.sockets:
            for _ in range(worker.worker_connections):  # what waits in the queue, bounded
                accepted = worker.nr_conns
                worker.accept(listener)  # answered with "Connection: close" (stopping)
                if worker.nr_conns == accepted:
                    break
            listener.close()

    worker.set_accept_enabled = set_accept_enabled


def quit_at_once(worker: Any) -> None:
    """Make a ``worker`` leave SIGINT to the master, and end at once on SIGQUIT.

    Ctrl-C sends SIGINT to the whole process group, so each worker got it from the
    terminal and then SIGQUIT from the master. gunicorn's handler for both shuts the
    gthread worker's thread pool down from inside the signal handler, which deadlocks
    when the main thread was interrupted holding the pool's lock (CPython issue 121649):
    the worker then hung until the master killed it after its graceful timeout, logging
    "Perhaps out of memory?". Here the terminal's SIGINT is ignored by the worker, and
    the master's SIGQUIT (a quick shutdown, as gunicorn documents it) ends the process
    without taking any lock; a graceful stop (TERM) is left as gunicorn does it.
    Called in the child right after the fork, before the worker sets its handlers.
    """
    set_handlers = worker.init_signals

    def init_signals() -> None:
        set_handlers()
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    def handle_quit(signum: int, frame: Any) -> None:
        os._exit(0)  # no lock, no thread joined: what the threads serve is dropped

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    worker.init_signals = init_signals
    worker.handle_quit = handle_quit
