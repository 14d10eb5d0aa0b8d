"""Every assumption app/compat/ makes about a library, checked on the installed one.

An upgrade that breaks a reach fails here: then check the new version's internals,
adapt the reach (or drop it), and update the module's ``CHECKED_VERSION``.
"""

from __future__ import annotations

import errno
import inspect
import os
import secrets
import subprocess
import sys
import time
from importlib.metadata import version

import jwt
import pytest
from authlib.integrations.flask_client import FlaskIntegration
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from flask import Request
from gunicorn.workers.gthread import ThreadWorker
from jwt.algorithms import HMACAlgorithm, get_default_algorithms
from prometheus_client.multiprocess import MultiProcessCollector
from werkzeug.exceptions import BadRequest
from werkzeug.test import EnvironBuilder

from app.compat import authlib, gunicorn, prometheus, pyjwt, werkzeug
from app.compat.authlib import forget_old_pending_logins, pending_login_key
from app.compat.pyjwt import CheckedSecret, compact_jws, hs256_verifier, jws_header_segment
from tests.helpers.tokens import valid_claims
from tests.helpers.tools import ROOT

pytestmark = pytest.mark.store("sqlite")  # no store is involved


@pytest.mark.parametrize(
    "module", [authlib, gunicorn, prometheus, pyjwt, werkzeug], ids=lambda m: m.__name__
)
def test_the_installed_version_is_the_one_checked(module):
    installed = ".".join(version(module.DISTRIBUTION).split(".")[:2])
    assert installed == module.CHECKED_VERSION, (
        f"{module.DISTRIBUTION} {installed}: check {module.__name__} against it, then"
        " update its CHECKED_VERSION"
    )


# --- Werkzeug ------------------------------------------------------------------------


def test_werkzeug_still_decodes_a_query_strictly_which_the_service_request_answers():
    """The need: Flask's own request raises on a raw byte; the service's is a 400."""
    environ = EnvironBuilder("/x").get_environ()
    environ["QUERY_STRING"] = "a=\xff"
    with pytest.raises(UnicodeDecodeError):
        _ = Request(environ).args
    with pytest.raises(BadRequest):
        _ = werkzeug.ServiceRequest(environ).args
    environ["QUERY_STRING"] = "a=%ff&b=%C3%A9"  # percent-encoded: read as before
    assert werkzeug.ServiceRequest(environ).args == Request(environ).args


# --- PyJWT ---------------------------------------------------------------------------


def hs256_token(secret: bytes, claims: dict) -> str:
    return jwt.encode(claims, secret, "HS256")


def test_pyjwt_verifies_a_pyjwk_with_its_own_algorithm_object(monkeypatch):
    """The gain: jwt.decode goes through the PyJWK's Algorithm, which skips the key checks."""
    secret = secrets.token_bytes(64)
    algorithm = CheckedSecret(secret)
    verifier = hs256_verifier(algorithm)
    claims = valid_claims()
    token = hs256_token(secret, claims)
    prepared = []

    def spied(key: bytes) -> bytes:
        prepared.append(key)
        return CheckedSecret.prepare_key(algorithm, key)

    monkeypatch.setattr(algorithm, "prepare_key", spied)
    monkeypatch.setattr(
        HMACAlgorithm, "prepare_key", lambda *args: pytest.fail("the secret was checked again")
    )
    assert jwt.decode(token, verifier, algorithms=["HS256"]) == claims
    assert prepared  # PyJWT prepared the key through the PyJWK's algorithm
    assert all(key is algorithm.secret for key in prepared)


def test_the_checked_secret_still_checks_every_other_key():
    algorithm = CheckedSecret(secrets.token_bytes(64))
    with pytest.raises(jwt.InvalidKeyError):
        algorithm.prepare_key(
            b"-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----"
        )
    with pytest.raises(jwt.InvalidKeyError):
        CheckedSecret(b"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA")


def test_the_verifier_stays_pinned_to_hs256():
    secret = secrets.token_bytes(64)
    verifier = hs256_verifier(CheckedSecret(secret))
    assert verifier.algorithm_name == "HS256"
    token = jwt.encode(valid_claims(), secret, "HS384")
    with pytest.raises(jwt.InvalidAlgorithmError):
        jwt.decode(token, verifier, algorithms=["HS384"])


@pytest.mark.parametrize("kid", [None, "a-kid"])
@pytest.mark.parametrize("algorithm", ["HS256", "EdDSA", "ES256"])
def test_the_header_segment_is_the_one_jwt_encode_writes(algorithm, kid):
    key = secrets.token_bytes(64) if algorithm == "HS256" else new_private_key(algorithm)
    headers = {"kid": kid} if kid is not None else None
    token = jwt.encode(valid_claims(), key, algorithm, headers)
    assert token.split(".")[0] == jws_header_segment(algorithm, kid)


def test_a_compact_jws_is_what_jwt_encode_writes():
    secret = secrets.token_bytes(64)
    claims = valid_claims()
    signed = compact_jws(
        jws_header_segment("HS256", "k"), claims, get_default_algorithms()["HS256"], secret
    )
    assert signed == jwt.encode(claims, secret, "HS256", {"kid": "k"})


def new_private_key(algorithm: str) -> ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey:
    if algorithm == "EdDSA":
        return ed25519.Ed25519PrivateKey.generate()
    return ec.generate_private_key(ec.SECP256R1())


# --- Authlib -------------------------------------------------------------------------


def test_authlib_keeps_a_pending_login_under_the_key_read_here():
    session: dict = {}
    before = time.time()
    FlaskIntegration("corp").set_state_data(session, "the-state", {"nonce": "n"})
    key = pending_login_key("corp", "the-state")
    assert list(session) == [key]
    assert key.startswith(authlib.PENDING_LOGIN_PREFIX)
    assert session[key]["exp"] >= before
    assert FlaskIntegration("corp").get_state_data(session, "the-state") == {"nonce": "n"}


def test_only_the_newest_pending_logins_are_kept():
    session: dict = {"user": "kept", "_state_corp_broken": "not a dict"}
    integration = FlaskIntegration("corp")
    for number in range(4):
        integration.expires_in = 3600 + number  # a later login expires later
        integration.set_state_data(session, f"s{number}", {})
    forget_old_pending_logins(session, keep=2)
    assert sorted(session) == ["_state_corp_s2", "_state_corp_s3", "user"]


# --- prometheus_client ---------------------------------------------------------------


@pytest.mark.processes
def test_prometheus_client_counts_in_memory_once_switched(tmp_path):
    """Its value class is read when a metric is made: switched, no file is written."""
    script = (
        "from app.compat.prometheus import count_in_process_memory\n"
        "import prometheus_client\n"
        "from prometheus_client import values\n"
        "assert values.ValueClass is not values.MutexValue, 'files not in use'\n"
        "count_in_process_memory()\n"
        "counter = prometheus_client.Counter('c', 'c', registry=None)\n"
        "counter.inc(3)\n"
        "assert counter._value.get() == 3\n"
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, cwd=ROOT)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.processes
def test_prometheus_client_reads_a_merged_file_as_the_files_it_adds_up(tmp_path):
    """Two processes' real files, of every kind of value the service writes, merged into
    one file named as the service names it: a scrape shows the same totals, and every
    block of the new file is allocated."""
    script = (
        "import prometheus_client\n"
        "counter = prometheus_client.Counter('c', 'c help', ['l'], registry=None)\n"
        "histogram = prometheus_client.Histogram('h', 'h help', ['l'], registry=None,"
        " buckets=(0.5, 1.0))\n"
        "counter.labels('a').inc(2)\n"
        "counter.labels('\u00e9\"').inc(3)\n"
        "histogram.labels('a').observe(0.25)\n"
        "histogram.labels('a').observe(0.75)\n"
        "prometheus_client.Counter('plain', 'no labels', registry=None).inc()\n"
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for _ in range(2):  # two processes, two pids
        subprocess.run([sys.executable, "-c", script], env=env, check=True, cwd=ROOT)

    def scrape() -> dict:
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for metric in MultiProcessCollector(None, str(tmp_path)).collect()
            for sample in metric.samples
        }

    before = scrape()
    assert before[("c_total", (("l", "a"),))] == 4
    assert before[("h_bucket", (("l", "a"), ("le", "0.5")))] == 2
    for kind in ("counter", "histogram"):
        sources = [str(path) for path in tmp_path.glob(f"{kind}_*.db")]
        assert len(sources) == 2
        merged = tmp_path / f"{kind}_merged.db"
        prometheus.write_merged_metric_file(str(merged), sources)
        assert merged.stat().st_blocks * 512 >= merged.stat().st_size  # allocated, not sparse
        for source in sources:
            os.unlink(source)
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "counter_merged.db",
        "histogram_merged.db",
    ]
    assert scrape() == before
    # merged again with a later process's file: added up once more
    subprocess.run([sys.executable, "-c", script], env=env, check=True, cwd=ROOT)
    (later,) = (path for path in tmp_path.glob("counter_*.db") if path.name != "counter_merged.db")
    prometheus.write_merged_metric_file(
        str(tmp_path / "counter_new.db"), [str(later), str(tmp_path / "counter_merged.db")]
    )
    os.replace(tmp_path / "counter_new.db", tmp_path / "counter_merged.db")
    os.unlink(later)
    assert scrape()[("c_total", (("l", "a"),))] == 6


@pytest.mark.processes
def test_a_merged_file_the_disk_cannot_give_is_not_left_behind(tmp_path, monkeypatch):
    source = tmp_path / "counter_1.db"
    subprocess.run(
        [sys.executable, "-c", "import prometheus_client as p; p.Counter('c', 'c').inc()"],
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)},
        check=True,
        cwd=ROOT,
    )
    (written,) = tmp_path.iterdir()
    written.rename(source)

    def full_disk(descriptor: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full_disk)
    with pytest.raises(OSError, match="No space left"):
        prometheus.write_merged_metric_file(str(tmp_path / "counter_merged.db"), [str(source)])
    assert [path.name for path in tmp_path.iterdir()] == ["counter_1.db"]


# --- gunicorn ------------------------------------------------------------------------


def test_gthread_workers_have_what_the_stopping_hook_wraps():
    """The names the hook reads, on gunicorn's gthread worker (the real stop is
    tests/system/test_reloads.py's, on a real gunicorn)."""
    assert list(inspect.signature(ThreadWorker.set_accept_enabled).parameters) == [
        "self",
        "enabled",
    ]
    assert list(inspect.signature(ThreadWorker.accept).parameters) == ["self", "listener"]
    source = inspect.getsource(ThreadWorker)
    for name in ("self.nr_conns", "self.worker_connections", "self.alive", "self.sockets"):
        assert name in source, name


def test_the_stopping_hook_takes_the_queue_then_closes_the_listener():
    calls = []

    class Listener:
        def close(self):
            calls.append("close")

    class Worker:
        alive, worker_connections, nr_conns = True, 3, 0

        def __init__(self):
            self.sockets = [Listener()]

        def set_accept_enabled(self, enabled):
            calls.append(("enabled", enabled))

        def accept(self, listener):
            calls.append("accept")
            if calls.count("accept") <= 2:  # two connections wait, then none
                self.nr_conns += 1

    worker = Worker()
    gunicorn.refuse_new_connections_when_stopping(worker)
    worker.set_accept_enabled(False)  # alive: only gunicorn's own switch
    assert calls == [("enabled", False)]
    worker.alive = False
    worker.set_accept_enabled(False)
    assert calls[1:] == [("enabled", False), "accept", "accept", "accept", "close"]


def test_workers_set_their_quit_handlers_from_the_instance_after_post_fork():
    """quit_at_once replaces the worker's handle_quit and wraps init_signals on the
    instance, in post_fork: gunicorn must call post_fork before init_process, and
    init_signals must register self.handle_quit for SIGINT and SIGQUIT."""
    from gunicorn.arbiter import Arbiter
    from gunicorn.workers.base import Worker

    spawn = inspect.getsource(Arbiter.spawn_worker)
    assert spawn.index("self.cfg.post_fork(self, worker)") < spawn.index("worker.init_process()")
    assert "self.init_signals()" in inspect.getsource(Worker.init_process)
    handlers = inspect.getsource(Worker.init_signals)
    assert "signal.signal(signal.SIGQUIT, self.handle_quit)" in handlers
    assert "signal.signal(signal.SIGINT, self.handle_quit)" in handlers


@pytest.mark.processes
def test_a_quitting_worker_ignores_the_terminals_interrupt_and_exits_on_quit():
    """In a child process: SIGINT is ignored once the handlers are set, SIGQUIT exits 0."""
    script = (
        "import os, signal, time\n"
        "from app.compat.gunicorn import quit_at_once\n"
        "class Worker:\n"
        "    def init_signals(self):\n"
        "        signal.signal(signal.SIGINT, lambda *a: os._exit(3))\n"
        "        signal.signal(signal.SIGQUIT, self.handle_quit)\n"
        "    def handle_quit(self, signum, frame):\n"
        "        os._exit(4)\n"
        "worker = Worker()\n"
        "quit_at_once(worker)\n"
        "worker.init_signals()\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "time.sleep(0.2)\n"
        "os.kill(os.getpid(), signal.SIGQUIT)\n"
        "time.sleep(5)\n"
        "os._exit(5)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, timeout=30, check=False)
    assert result.returncode == 0
