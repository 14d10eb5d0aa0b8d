"""Where the service relies on what a library does not promise, each reach in one place.

A reach stays only where ``make bench`` can see its gain (docs/performance.md has the
figures, and the reaches dropped for a gain too small to resolve), or where no public API
does what the service needs.
tests/test_private_apis.py checks every assumption below against the installed
library, and that its version is the one checked (``CHECKED_VERSIONS``): an upgrade
that breaks one fails there, before it reaches a server.

- PyJWT: an HS256 secret checked once rather than on every signature check; tokens
  signed without ``jwt.encode``, byte for byte what it writes.
- Authlib: the session keys under which its Flask client keeps pending logins, read
  to bound the login-state cookie.
- gunicorn: the gthread worker's accept switch, wrapped so that a stopping worker
  refuses new connections at once.
- prometheus_client: its value class, switched to in-memory counting in a worker whose
  metric files the disk cannot give (docs/operations.md, "A full disk"); the exited
  workers' files, merged into one file per kind in its own format (docs/operations.md,
  "Metrics").
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import MutableMapping
from typing import Any

import jwt
import orjson
from jwt.algorithms import Algorithm, HMACAlgorithm

#: The distribution and the version (major.minor) whose internals were checked.
CHECKED_VERSIONS = {
    "pyjwt": "2.15",
    "authlib": "1.9",
    "prometheus-client": "0.26",
    "gunicorn": "27.0",
}

# --- PyJWT ---------------------------------------------------------------------------


class CheckedSecret(HMACAlgorithm):
    """HS256 bound to one secret, which passed PyJWT's key checks once, when it was loaded.

    PyJWT checks an HMAC key on every call (that it is not a PEM, DER or JWK key);
    only this very secret object skips them here, and any other key still goes
    through all of them.
    """

    def __init__(self, secret: bytes) -> None:
        super().__init__(HMACAlgorithm.SHA256)
        self.secret = super().prepare_key(secret)

    def prepare_key(self, key: str | bytes) -> bytes:
        return key if key is self.secret else super().prepare_key(key)


def hs256_verifier(algorithm: CheckedSecret) -> jwt.PyJWK:
    """Return the PyJWK that ``jwt.decode`` verifies HS256 tokens of ``algorithm``'s secret with.

    PyJWT verifies a PyJWK with the PyJWK's own ``Algorithm`` attribute, and prepares
    its ``key`` through it on every call: here that is ``algorithm``, whose secret is
    checked already. The algorithm stays pinned to HS256 by the PyJWK itself.
    """
    verifier = jwt.PyJWK({"kty": "oct", "k": base64url(algorithm.secret)}, "HS256")
    verifier.Algorithm = algorithm
    verifier.key = algorithm.secret
    return verifier


def jws_header_segment(algorithm: str, kid: str | None = None) -> str:
    """Return a token's header segment as ``jwt.encode`` writes it: sorted compact JSON."""
    header = {"alg": algorithm, "kid": kid, "typ": "JWT"}
    if kid is None:
        del header["kid"]
    return base64url(json.dumps(header, separators=(",", ":"), sort_keys=True).encode())


def compact_jws(header_segment: str, claims: dict[str, Any], signer: Algorithm, key: Any) -> str:
    """Return the token ``jwt.encode`` would write of ``claims`` under ``header_segment``.

    Signed by PyJWT's own algorithm object; only the header, the same for every
    token of a key, is made once instead of each time, and the key is not checked again.
    """
    try:
        payload = orjson.dumps(claims)  # compact JSON, like jwt.encode's, UTF-8 unescaped
    except TypeError:  # a lone surrogate (in a provider's user id): JSON's \u escape
        payload = json.dumps(claims, separators=(",", ":")).encode()
    signing_input = f"{header_segment}.{base64url(payload)}"
    signature = signer.sign(signing_input.encode("ascii"), key)
    return f"{signing_input}.{base64url(signature)}"


def base64url(data: bytes) -> str:
    """Return ``data`` in base64url without padding, as JWS writes it."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


# --- Authlib -------------------------------------------------------------------------

#: Authlib's Flask client keeps each pending login in the session under
#: ``_state_<provider>_<state>``, its value a dict whose ``exp`` is a Unix time.
PENDING_LOGIN_PREFIX = "_state_"


def pending_login_key(provider: str, state: str | None) -> str:
    """Return the session key of ``provider``'s pending login of ``state``."""
    return f"{PENDING_LOGIN_PREFIX}{provider}_{state}"


def forget_old_pending_logins(session: MutableMapping[str, Any], keep: int) -> None:
    """Drop all but the ``keep`` newest pending logins (of any provider) from ``session``."""
    pending = sorted(
        (key for key in session if key.startswith(PENDING_LOGIN_PREFIX)),
        key=lambda key: session[key].get("exp", 0) if isinstance(session[key], dict) else 0,
    )
    for key in pending[: max(0, len(pending) - keep)]:
        session.pop(key)


# --- prometheus_client ---------------------------------------------------------------


def count_in_process_memory() -> None:
    """Make the metrics created from now on count in this process's memory, not in files.

    prometheus_client chooses its value class once, at import, from
    ``PROMETHEUS_MULTIPROC_DIR``; it may be imported already (gunicorn's master imports
    it when a worker exits), so the class itself is switched.
    """
    from prometheus_client import values  # only a worker whose files failed needs it

    values.ValueClass = values.MutexValue


def write_merged_metric_file(path: str, sources: list[str]) -> None:
    """Write at ``path``, a new file, the counts of the files ``sources`` (counters, or
    histograms) added up, as prometheus_client writes one process's file.

    prometheus_client adds the files up with ``MultiProcessCollector.merge``, which with
    ``accumulate=False`` keeps each histogram bucket's own count, fit for being written
    back; writing it back (``MmapedDict``, ``mmap_key``) is not public, nor that a scrape
    reads every ``<kind>_<anything>.db`` of the folder, taking the kind from the name.
    Every block is allocated before the file is mapped: on a full disk this raises
    OSError (ENOSPC) rather than a SIGBUS, and leaves no file behind.
    """
    from prometheus_client.mmap_dict import MmapedDict, mmap_key
    from prometheus_client.multiprocess import MultiProcessCollector

    entries = [
        (
            mmap_key(
                metric.name,
                sample.name,
                list(sample.labels),
                list(sample.labels.values()),
                metric.documentation,
            ),
            sample.value,
        )
        for metric in MultiProcessCollector.merge(sources, accumulate=False)
        for sample in metric.samples
    ]
    # the used length and its padding, then each entry: the key's length, the key padded
    # to 8 bytes, the value and its timestamp
    size = 8 + sum(4 + _padded_length(key) + 16 for key, _ in entries)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.posix_fallocate(descriptor, 0, size)
    except OSError:
        os.unlink(path)
        raise
    finally:
        os.close(descriptor)
    merged = MmapedDict(path)  # an existing file's size is its capacity: nothing to grow
    try:
        for key, value in entries:
            merged.write_value(key, value, 0.0)
    finally:
        merged.close()


def _padded_length(key: str) -> int:
    length = len(key.encode("utf-8"))
    return length + (8 - (length + 4) % 8)


# --- gunicorn ------------------------------------------------------------------------


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
