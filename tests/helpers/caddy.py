"""Debian's caddy as the tests run it: the shipped Caddyfile with a test's own ports, on
loopback, over plain HTTP, with no admin endpoint and its state in the test's folder."""

from __future__ import annotations

import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.servers import base_environment, free_port, stop_process, wait_until
from tests.helpers.tools import ROOT, require_tool, which

CADDYFILE = ROOT / "deploy" / "caddy" / "Caddyfile"


@dataclass
class Caddy:
    url: str
    process: subprocess.Popen

    def stop(self) -> None:
        stop_process(self.process)


#: What begins each line of the shipped Caddyfile's browser sign-in, commented out.
SIGNIN_MARK = "#signin "


def caddy_config(
    port: int,
    service_port: int,
    upstream_port: int,
    host: str = "127.0.0.1",
    signin_provider: str | None = None,
) -> str:
    """Return the shipped Caddyfile with this test's ports, on ``host``, over plain HTTP,
    and with no admin endpoint (two tests' Caddys would share its port); with the browser
    sign-in uncommented, as its comment says, for ``signin_provider``."""
    text = CADDYFILE.read_text()
    replacements = [
        ("app.example.com {", f"http://:{port} {{\n\tbind {host}"),
        ("forward_auth 127.0.0.1:8080 {", f"forward_auth 127.0.0.1:{service_port} {{"),
        ("reverse_proxy 127.0.0.1:9000 {", f"reverse_proxy 127.0.0.1:{upstream_port} {{"),
    ]
    if signin_provider is not None:
        assert text.count(f"\n{SIGNIN_MARK}") > 10, "no sign-in in the Caddyfile"
        text = text.replace(f"\n{SIGNIN_MARK}", "\n")
        replacements += [
            ("\t\treverse_proxy 127.0.0.1:8080\n", f"\t\treverse_proxy 127.0.0.1:{service_port}\n"),
            ("/auth/corp/login", f"/auth/{signin_provider}/login"),
        ]
    for old, new in replacements:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return "{\n\tadmin off\n}\n\n" + text


def start_caddy(
    folder: Path,
    service_port: int,
    upstream_port: int,
    host: str = "127.0.0.1",
    signin_provider: str | None = None,
    port: int | None = None,
) -> Caddy:
    """Start Debian's caddy with the shipped Caddyfile (``caddy_config``); its state goes to
    ``folder``."""
    binary = which("caddy")
    require_tool(binary is not None, "caddy", "apt-get install caddy")
    assert binary is not None
    folder.mkdir()
    port = port or free_port()
    config = folder / "Caddyfile"
    config.write_text(caddy_config(port, service_port, upstream_port, host, signin_provider))
    env = {
        **base_environment(),
        "HOME": str(folder),
        "XDG_CONFIG_HOME": str(folder / "config"),
        "XDG_DATA_HOME": str(folder / "data"),
    }
    log = folder / "caddy.log"
    with log.open("ab") as output:
        process = subprocess.Popen(
            [binary, "run", "--config", str(config), "--adapter", "caddyfile"],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(log.read_text()[-2000:])
        try:
            socket.create_connection((host, port), timeout=1).close()
            return True
        except OSError:
            return False

    wait_until(ready, 15, "caddy")
    return Caddy(f"http://{host}:{port}", process)
