"""gunicorn's settings: ``gunicorn -c python:app.serving.gunicorn_config app.serving.wsgi:app``
(what ``token-service serve`` runs; ``gunicorn.conf.py`` at the repository's root reads this
module, for ``make run``).

The settings are read and checked here, in the master, so a bad value stops
the service before any worker starts, with one clear line. The instance folder and
the generated signing secret or key are created here too, before the workers fork,
and every signing key is loaded once to check it.
"""

import contextlib
import errno
import ipaddress
import logging
import multiprocessing
import os
import shutil
import socket
import sys
from typing import Any

from app.auth.keys import settings_key_ring
from app.compat.gunicorn import quit_at_once, refuse_new_connections_when_stopping
from app.config.parsers import ConfigError
from app.config.settings import Settings
from app.gateway.rules import RulesFileError, read_rules_file
from app.http.proxy import everyone_trusted_warning
from app.instance import prepare_instance
from app.observability.logging_config import ServiceGunicornLogger, logging_config
from app.observability.metric_files import FOLDER_VARIABLE
from app.observability.metrics_scrape import (
    fresh_multiprocess_folder,
    merge_exited_workers,
    own_multiprocess_folder,
)
from app.serving import command

try:
    settings = prepare_instance(Settings.load())
    settings_key_ring(settings)  # every key loaded and checked now, once, in the master
except ConfigError as error:
    if command.checked_settings is None:
        sys.exit(f"configuration error: {error}")
    # gunicorn.conf.py runs this module again at each HUP: a bad edit of the settings
    # keeps those in force rather than stopping the master, and says why
    logging.getLogger("gunicorn.error").error(
        "configuration error, the settings in force are kept: %s", error
    )
    settings = command.checked_settings
# handed to every worker the master forks (app/serving/command.py, load_app)
command.checked_settings = settings

bind = [
    f"[{settings.host}]:{settings.port}"
    if ":" in settings.host
    else f"{settings.host}:{settings.port}"
]
# Chosen by measurement (docs/performance.md): gthread keeps connections open between
# requests, which sync workers cannot, so nginx's upstream keepalive saves a TCP
# connection per request. One process per core (the GIL runs one
# thread at a time); the threads cover store waits.
worker_class = "gthread"
workers = settings.web_concurrency or max(2, multiprocessing.cpu_count())
threads = 4
timeout = 30
graceful_timeout = 20
# Longer than nginx's upstream keepalive_timeout (1 s): nginx, not gunicorn, closes an idle
# connection, so nginx never sends a request on one that gunicorn has just closed. A
# stopping worker keeps its kept-alive connections 2 s more (gthread), still longer.
keepalive = 65
# The service writes its own request log (app/http/request_log.py): gunicorn's is off.
accesslog = None
errorlog = "-"
loglevel = settings.log_level.lower()
# gunicorn's messages and the app's: one format (LOG_FORMAT), one redaction
logconfig_dict = logging_config(settings.log_format, settings.log_level)
# gunicorn's logger, but for the access lines it would otherwise build for nothing
logger_class = ServiceGunicornLogger
# X-Forwarded-* are trusted by the app alone, from the TRUSTED_PROXIES (app/http/proxy.py);
# gunicorn would otherwise believe X-Forwarded-Proto from any loopback client.
forwarded_allow_ips = ""
# gunicorn's control socket is one fixed path per user; several instances would clash.
control_socket_disable = True


# Metrics (METRICS, default on): every worker counts into files in one folder, which
# prometheus_client finds through PROMETHEUS_MULTIPROC_DIR. The master makes it fresh at
# each start, before any worker forks (and before anything imports prometheus_client),
# and marks it as its own: the hooks below touch no other folder the variable may name.
def on_starting(server: Any) -> None:
    refuse_an_address_in_use(server)
    if settings.metrics:
        os.environ[FOLDER_VARIABLE] = fresh_multiprocess_folder(settings.instance_path)


def refuse_an_address_in_use(server: Any) -> None:
    """Stop at once, in one line, when the port gunicorn is about to bind is taken.

    gunicorn would try five times, a second apart, logging two lines each time with no
    hint. Only the addresses gunicorn binds itself are checked: not a socket handed over
    by systemd (LISTEN_FDS), by a re-exec (USR2) or as a descriptor (fd://).
    """
    # gunicorn takes systemd's sockets only when LISTEN_PID names this process
    handed_over = os.environ.get("LISTEN_FDS") and os.environ.get("LISTEN_PID") == str(os.getpid())
    if server.LISTENERS or server.master_pid or handed_over:
        return
    for address in server.cfg.address:
        if not isinstance(address, tuple):  # a Unix socket or a descriptor
            continue
        host, port = address[0], address[1]
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds
            if server.cfg.reuse_port:  # a port shared on purpose (--reuse-port) is no clash
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            try:
                probe.bind(address)
            except OSError as error:
                if error.errno != errno.EADDRINUSE:
                    continue  # gunicorn reports any other failure itself
                named = "PORT" if port == settings.port else "gunicorn's bind port"
                sys.exit(
                    f"configuration error: {named} {port} is in use on {host} by another"
                    " program (another `make run`?): stop it, or set PORT to a free port"
                )


def child_exit(server: Any, worker: Any) -> None:
    # an exited worker's counts go into the merged files (the totals never go back), and
    # its files go, so the folder holds only the live workers' files and the merged ones
    folder = own_multiprocess_folder()
    if folder is not None:
        merge_exited_workers(folder, server.WORKERS)


def on_exit(server: Any) -> None:
    folder = own_multiprocess_folder()
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


# The master reads the rules file again before each fork (a HUP's new workers, or one that
# replaces a worker that ended), so the worker inherits the newest good reading: with a
# file broken since, it boots on that reading and logs the problem, instead of failing to
# boot, which would stop the master (app/gateway/rules.py, last_read_well).
def pre_fork(server: Any, worker: Any) -> None:
    if settings.access_rules_file is not None:
        with contextlib.suppress(RulesFileError):
            read_rules_file(settings.access_rules_file)


# Ctrl-C stops every process at once, and the terminal's SIGINT reaches the master only
# (app/compat/gunicorn.py says why the workers' own handling could hang for 20 s).
def post_fork(server: Any, worker: Any) -> None:
    quit_at_once(worker)


# A stopping worker (TERM: gunicorn stopping, or the old workers of a HUP) refuses new
# connections at once, once it has taken what already waits in the listen queue; see
# app/compat/gunicorn.py and docs/deployment.md, "Reloads and restarts".
def post_worker_init(worker: Any) -> None:
    refuse_new_connections_when_stopping(worker)


def reachable_addresses(server: Any) -> list[str]:
    """Return the addresses gunicorn listens on that other hosts may reach (not loopback)."""
    reachable = []
    for listener in server.LISTENERS:
        address = listener.sock.getsockname()
        if isinstance(address, tuple) and not ipaddress.ip_address(address[0]).is_loopback:
            reachable.append(str(listener))
    return reachable


def when_ready(server: Any) -> None:
    """Refuse, or warn once per start, in the master, of what clients beyond this host reach:
    the bind itself (gunicorn's own, or one from GUNICORN_CMD_ARGS or systemd), a login
    that checks no password, trusted proxies that are every address."""
    reachable = reachable_addresses(server)
    if reachable and not settings.behind_proxy:
        on_exit(server)  # gunicorn calls it only once the main loop has started
        sys.exit(
            f"configuration error: listening on {', '.join(reachable)}, beyond loopback, but"
            " gunicorn has no header timeout (a few clients that send their headers slowly"
            " stall it): put a proxy that reads the headers itself in front (nginx, an"
            " ingress) and set BEHIND_PROXY=true, or listen on loopback"
        )
    if warning := everyone_trusted_warning(settings.trusted_proxies):
        server.log.warning(warning)
    if settings.users_file is None:
        server.log.warning(
            "USERS_FILE is not set: /login accepts any username with any password (SPEC.md's"
            " open login); set USERS_FILE and add users with `flask users add NAME`"
        )
        if settings.open_login and (reachable or settings.behind_proxy or settings.trusted_proxies):
            server.log.warning(
                "WARNING: OPEN LOGIN: OPEN_LOGIN=true and no USERS_FILE, so anyone who reaches"
                " %s can get an admin token; set USERS_FILE unless a system in front"
                " authenticates every user",
                ", ".join(reachable) if reachable else "the proxy in front",
            )
    elif not os.path.exists(settings.users_file):
        server.log.warning(
            "USERS_FILE %s does not exist: every login is refused until `flask users add`"
            " creates it",
            settings.users_file,
        )
