"""Harness around a real OpenID Connect provider for end-to-end tests.

The provider is Node's ``oidc-provider`` (see ``tests/system/oidc_provider/``), run as a
subprocess on 127.0.0.1. Install its dependencies once with::

    cd tests/system/oidc_provider && npm ci

Typical use (e.g. in a pytest fixture)::

    if not node_available():
        pytest.skip(node_unavailable_reason())
    with start_provider(port, "client", "secret", [redirect_uri]) as op:
        ...  # point the app at op.issuer
        resp = walk_login(browser_session, app_redirect_location, login="alice")
        resp.headers["Location"]  # -> redirect_uri?code=...&state=...&iss=...

Only the standard library and ``requests`` are used.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import requests

PROVIDER_DIR = Path(__file__).resolve().parents[1] / "system" / "oidc_provider"
SERVER_JS = PROVIDER_DIR / "server.js"
INSTALL_HINT = "cd tests/system/oidc_provider && npm ci"


# --------------------------------------------------------------------------
# Availability
# --------------------------------------------------------------------------


def node_unavailable_reason() -> str | None:
    """Return why the provider cannot run here, or None if it can."""
    if shutil.which("node") is None:
        return "node is not on PATH (Node.js >= 20.18 is needed for the OIDC provider)"
    if not (PROVIDER_DIR / "node_modules" / "oidc-provider" / "package.json").is_file():
        return f"oidc-provider is not installed; run: {INSTALL_HINT}"
    return None


def node_available() -> bool:
    """True when node and the provider's node_modules are present."""
    return node_unavailable_reason() is None


def expected_claims(login: str) -> dict:
    """The claims server.js derives from a login name (keep the two in sync).

    "alice" -> {"sub": "alice", "name": "Alice Example", "email": "alice@example.com", ...}
    """
    local = login.split("@")[0]
    parts = [p[:1].upper() + p[1:] for p in _split_name(local)]
    return {
        "sub": login,
        "name": " ".join([*parts, "Example"]),
        "given_name": parts[0] if parts else local,
        "family_name": "Example",
        "email": login if "@" in login else f"{login}@example.com",
        "email_verified": "unverified" not in login,
        "groups": ["admins"] if login.startswith("admin") else ["staff"],
    }


def _split_name(local: str) -> list[str]:
    # Same as JS: local.split(/[._-]+/).filter(Boolean)
    out, cur = [], ""
    for ch in local:
        if ch in "._-":
            if cur:
                out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        out.append(cur)
    return out


# --------------------------------------------------------------------------
# Process management
# --------------------------------------------------------------------------


class ProviderProcess:
    """A running provider. Use ``stop()`` or a ``with`` block."""

    def __init__(self, proc: subprocess.Popen, issuer: str, log_path: Path):
        self._proc = proc
        self.issuer = issuer
        self.pid = proc.pid
        self.log_path = log_path
        self._final_log: str | None = None

    @property
    def discovery_url(self) -> str:
        return f"{self.issuer}/.well-known/openid-configuration"

    def is_running(self) -> bool:
        return self._proc.poll() is None

    def log(self) -> str:
        """Everything node wrote to stdout/stderr so far (errors land here)."""
        if self._final_log is not None:
            return self._final_log
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM the node process, wait, SIGKILL if it does not exit. Idempotent."""
        if self._final_log is not None:
            return
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=timeout)
        if self._proc.stdin:
            self._proc.stdin.close()
        self._final_log = ""
        if self.log_path.exists():
            self._final_log = self.log_path.read_text(errors="replace")
            self.log_path.unlink()

    def __enter__(self) -> ProviderProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"<ProviderProcess pid={self.pid} issuer={self.issuer} {state}>"


def start_provider(
    port: int,
    client_id: str,
    client_secret: str,
    redirect_uris: list[str],
    *,
    token_endpoint_auth_method: str = "client_secret_basic",  # noqa: S107 (not a secret)
    profile_in_id_token: bool = False,
    issuer: str | None = None,
    timeout: float = 20.0,
    verbose: bool = False,
) -> ProviderProcess:
    """Start ``node server.js`` on 127.0.0.1:<port> and wait until discovery answers.

    ``redirect_uris`` are compared by the provider as exact strings (at the
    authorization and the token endpoint), so pass exactly what the app sends.
    ``token_endpoint_auth_method`` (``client_secret_basic`` or
    ``client_secret_post``) is the client's registered metadata; note that
    oidc-provider 9 accepts either of the two secret methods for such a client.
    On the provider's defaults, profile and email claims (``name``, ``email``)
    are at the userinfo endpoint only; ``profile_in_id_token=True`` puts them in
    the ID token too.
    Raises RuntimeError (including node's output) if startup fails or times out.
    """
    reason = node_unavailable_reason()
    if reason:
        raise RuntimeError(reason)

    issuer = issuer or f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "OIDC_PORT": str(port),
        "OIDC_ISSUER": issuer,
        "OIDC_CLIENT_ID": client_id,
        "OIDC_CLIENT_SECRET": client_secret,
        "OIDC_REDIRECT_URIS": json.dumps(list(redirect_uris)),
        "OIDC_TOKEN_ENDPOINT_AUTH_METHOD": token_endpoint_auth_method,
        "OIDC_PROFILE_IN_ID_TOKEN": "1" if profile_in_id_token else "0",
        "OIDC_EXIT_ON_STDIN_EOF": "1",
        "OIDC_VERBOSE": "1" if verbose else "0",
    }
    # Node output goes to a file rather than a pipe: nobody drains a pipe
    # during the test, and a full pipe buffer would block the provider.
    fd, log_name = tempfile.mkstemp(prefix=f"oidc-provider-{port}-", suffix=".log")
    log_path = Path(log_name)
    with os.fdopen(fd, "wb") as log_file:
        proc = subprocess.Popen(
            ["node", str(SERVER_JS)],
            cwd=PROVIDER_DIR,
            env=env,
            # Kept open and never written: node exits on EOF, so the provider
            # dies with us even if we are SIGKILLed and stop() never runs.
            stdin=subprocess.PIPE,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    provider = ProviderProcess(proc, issuer, log_path)

    # Poll the local address directly (not the issuer string, which a caller
    # may have overridden) and bypass any HTTP(S)_PROXY from the environment.
    probe_url = f"http://127.0.0.1:{port}/.well-known/openid-configuration"
    deadline = time.monotonic() + timeout
    last_error: Exception | str = "no attempt"
    with requests.Session() as probe:
        probe.trust_env = False
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                provider.stop()
                raise RuntimeError(
                    f"OIDC provider exited with code {proc.returncode} during startup:\n"
                    f"{provider.log()}"
                )
            try:
                r = probe.get(probe_url, timeout=1)
                if r.status_code == 200 and r.json().get("issuer") == issuer:
                    return provider
                last_error = f"HTTP {r.status_code}: {r.text[:200]}"
            except (requests.RequestException, ValueError) as exc:
                last_error = exc
            time.sleep(0.05)

    provider.stop()
    raise RuntimeError(
        f"OIDC provider did not answer {probe_url} within {timeout}s "
        f"(last error: {last_error}). Node output:\n{provider.log()}"
    )


# --------------------------------------------------------------------------
# Driving the development login / consent screens
# --------------------------------------------------------------------------


class _Form:
    def __init__(self, action: str | None, method: str):
        self.action = action
        self.method = method
        self.fields: dict[str, str] = {}


class _FormParser(HTMLParser):
    """Collects <form>s with their <input> name/value pairs, plus visible text."""

    def __init__(self):
        super().__init__()
        self.forms: list[_Form] = []
        self._current: _Form | None = None
        self._skip = 0  # inside <script>/<style>/<title>
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self._current = _Form(a.get("action"), (a.get("method") or "get").lower())
            self.forms.append(self._current)
        elif tag == "input" and self._current is not None and a.get("name"):
            self._current.fields[a["name"]] = a.get("value") or ""
        elif tag in ("script", "style", "title"):
            self._skip += 1

    def handle_endtag(self, tag):
        if tag == "form":
            self._current = None
        elif tag in ("script", "style", "title") and self._skip:
            self._skip -= 1

    def handle_data(self, data):
        if not self._skip and data.strip():
            self.text.append(" ".join(data.split()))


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc


def walk_login(
    session: requests.Session,
    authorize_url: str,
    login: str = "alice",
    password: str = "any",  # noqa: S107 (devInteractions ignore the password)
    *,
    max_steps: int = 12,
) -> requests.Response:
    """Drive the provider from its authorization URL to the client redirect.

    Follows redirects by hand and fills the devInteractions forms (login, then
    consent; either is skipped if the session/grant already covers it). Returns
    the provider's 3xx response whose Location leaves the provider's origin,
    i.e. ``<redirect_uri>?code=...&state=...&iss=...`` (or ``?error=...``);
    that redirect is NOT followed. Cookies live in ``session``, so reuse it to
    model an already signed-in browser.
    """
    provider_origin = _origin(authorize_url)
    resp = session.get(authorize_url, allow_redirects=False)
    for _ in range(max_steps):
        if resp.is_redirect:
            location = urljoin(resp.url, resp.headers["Location"])
            if _origin(location) != provider_origin:
                return resp  # redirect to the client: hand it back untouched
            resp = session.get(location, allow_redirects=False)
            continue

        parser = _FormParser()
        if "html" in resp.headers.get("Content-Type", ""):
            parser.feed(resp.text)
        form = next((f for f in parser.forms if "prompt" in f.fields), None)
        if resp.status_code != 200 or form is None:
            # Typically the provider's error page for errors it must not
            # redirect to the client (unknown client_id, unregistered
            # redirect_uri, expired interaction): surface its text.
            says = " | ".join(parser.text) if parser.text else resp.text[:500]
            raise RuntimeError(
                f"provider answered {resp.status_code} without a login/consent form "
                f"at {resp.url}: {says[:800]}"
            )

        data = dict(form.fields)
        if data["prompt"] == "login":
            data.update(login=login, password=password)
        elif data["prompt"] != "consent":
            raise RuntimeError(f"unsupported interaction prompt {data['prompt']!r} at {resp.url}")
        action = urljoin(resp.url, form.action or resp.url)
        resp = session.post(action, data=data, allow_redirects=False)

    raise RuntimeError(f"no redirect to the client after {max_steps} steps (last: {resp.url})")
