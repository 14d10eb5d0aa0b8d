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


def caddy_config(port: int, service_port: int, upstream_port: int) -> str:
    """Return the shipped Caddyfile with this test's ports, on loopback, over plain HTTP,
    and with no admin endpoint (two tests' Caddys would share its port)."""
    text = CADDYFILE.read_text()
    for old, new in [
        ("app.example.com {", f"http://:{port} {{\n\tbind 127.0.0.1"),
        ("forward_auth 127.0.0.1:8080 {", f"forward_auth 127.0.0.1:{service_port} {{"),
        ("reverse_proxy 127.0.0.1:9000 {", f"reverse_proxy 127.0.0.1:{upstream_port} {{"),
    ]:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return "{\n\tadmin off\n}\n\n" + text


def start_caddy(folder: Path, service_port: int, upstream_port: int) -> Caddy:
    """Start Debian's caddy with the shipped Caddyfile; its state goes to ``folder``."""
    binary = which("caddy")
    require_tool(binary is not None, "caddy", "apt-get install caddy")
    assert binary is not None
    folder.mkdir()
    port = free_port()
    config = folder / "Caddyfile"
    config.write_text(caddy_config(port, service_port, upstream_port))
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
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    wait_until(ready, 15, "caddy")
    return Caddy(f"http://127.0.0.1:{port}", process)
