"""The ``GET /metrics`` answer, for allowed addresses, and the folder of per-worker files.

Under gunicorn every worker counts into files of its own in one folder, which
gunicorn.conf.py creates fresh at each start (``fresh_multiprocess_folder``) and hands
over in the ``PROMETHEUS_MULTIPROC_DIR`` variable; a scrape, answered by any worker, adds
up every worker's files (metrics.py). When a worker exits, the master adds its files
into the merged ones and removes them (``merge_exited_workers``), so the folder stays the
size of the live workers' files, and no count is lost.

The master touches only a folder it made: one holding its mark (``OWNER_FILE``), never
one the variable names otherwise (an operator's, with METRICS off).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import shutil
from collections.abc import Collection

from flask import Response, current_app

from app.compat.prometheus import write_merged_metric_file
from app.config.parsers import IPNetwork
from app.extensions import metrics_of
from app.observability.metric_files import (
    FOLDER_VARIABLE,
    KINDS,
    MERGED_FILE,
    merge_lock,
    worker_files,
)

logger = logging.getLogger(__name__)

#: Folder of the per-process files, below the instance folder; one subfolder per master.
MULTIPROCESS_FOLDER = "metrics"
#: The file in which a master marks the folder it made as its own: its pid.
OWNER_FILE = "owner"
#: Seconds the master waits for the scrapes under way before merging an exited worker's
#: files, far longer than a scrape holds the folder; past that it leaves them to the next
#: worker's exit, so that the master never waits on a stuck scrape.
MERGE_WAIT_SECONDS = 1.0
#: Prometheus's classic text format, which every Prometheus version reads.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def metrics_response(address: str | None, allowed: tuple[IPNetwork, ...]) -> Response | None:
    """Return the ``/metrics`` answer for a client at ``address``, or None when metrics are
    off or ``address`` is outside ``allowed`` (METRICS_ALLOW)."""
    metrics = metrics_of(current_app)
    if metrics is None or not address_allowed(address, allowed):
        return None
    return Response(metrics.exposition(), 200, [("Content-Type", CONTENT_TYPE)])


def address_allowed(address: str | None, allowed: tuple[IPNetwork, ...]) -> bool:
    """Return whether ``address`` (an IP address, as the app sees the client) is in ``allowed``.

    ``::ffff:a.b.c.d`` (IPv4 on a dual-stack socket) is ``a.b.c.d``; anything that is not
    an IP address is in no network.
    """
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:
        return False
    if ip.version == 6 and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return any(ip in network for network in allowed)


def fresh_multiprocess_folder(instance_path: str) -> str:
    """Create this gunicorn master's empty folder of per-worker metric files; return it.

    One subfolder per master (named by its pid), so that servers sharing an
    instance folder never count into each other's files. Folders left by masters
    that are gone (killed with -9, say) are removed on the way.
    """
    root = os.path.join(instance_path, MULTIPROCESS_FOLDER)
    os.makedirs(root, mode=0o700, exist_ok=True)
    for name in os.listdir(root):
        if name.isdigit() and not _is_running(int(name)):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    folder = os.path.join(root, str(os.getpid()))
    shutil.rmtree(folder, ignore_errors=True)  # a master long gone that had this pid
    os.mkdir(folder, 0o700)
    with open(os.path.join(folder, OWNER_FILE), "x") as owner:
        owner.write(str(os.getpid()))
    return folder


def own_multiprocess_folder() -> str | None:
    """Return the folder ``PROMETHEUS_MULTIPROC_DIR`` names if this process, a gunicorn
    master, made it (``fresh_multiprocess_folder``); None for any other folder, or none.

    The variable alone does not tell: with METRICS off the master sets none, and one in
    the environment is the operator's. A HUP reads gunicorn.conf.py again, so the master
    keeps its decision in the folder, not in a variable of that module.
    """
    folder = os.environ.get(FOLDER_VARIABLE)
    if not folder:
        return None
    try:
        with open(os.path.join(folder, OWNER_FILE)) as owner:
            made_by_this_master = owner.read() == str(os.getpid())
    except (OSError, ValueError):  # no mark, or not text: not ours
        return None
    return folder if made_by_this_master else None


def merge_exited_workers(folder: str, live: Collection[int]) -> None:
    """Add the metric files of every worker not in ``live`` (pids) into the merged file
    of their kind, then remove them; a scrape sees the counts before or after, whole.

    Called by the master when a worker has exited, so all it counted is in its files
    (it flushes at exit; one killed with -9 loses its last second). Only the kinds the
    service has are merged (``KINDS``: no gauge). A merge that fails (a full disk, a
    scrape holding the folder too long) logs a warning and leaves the files where they
    are, counted as before: the next worker's exit takes them.
    """
    try:
        with merge_lock(folder, MERGE_WAIT_SECONDS) as locked:
            if not locked:
                logger.warning(
                    "metrics: exited workers' files in %s not merged (a scrape held them)",
                    folder,
                )
                return
            exited = [(kind, path) for kind, pid, path in worker_files(folder) if pid not in live]
            for kind in KINDS:
                paths = [path for of_kind, path in exited if of_kind == kind]
                if not paths:
                    continue
                merged = os.path.join(folder, MERGED_FILE.format(kind=kind))
                partial = f"{merged}.partial"  # not a .db: no scrape reads it
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(partial)  # left by a merge that failed half-way
                kept = [merged] if os.path.exists(merged) else []
                counted = [path for path in paths if os.path.getsize(path)]  # 0: never filled
                write_merged_metric_file(partial, counted + kept)
                os.replace(partial, merged)
                for path in paths:
                    os.unlink(path)
    except Exception as error:  # never into the master's loop
        logger.warning("metrics: exited workers' files in %s not merged (%s)", folder, error)


def _is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True
