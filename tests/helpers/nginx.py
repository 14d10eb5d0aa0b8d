"""nginx as the tests run it: its program, the shipped site config with a test's own
ports and log files, and a gateway's nginx before it."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import requests

from tests.helpers.servers import free_port, stop_process, wait_until
from tests.helpers.tools import ROOT, require_tool

SITE = ROOT / "deploy" / "nginx" / "token-service.conf"
#: Where the gateway examples include the snippets from, and keep their verdicts.
SNIPPETS = "/etc/nginx/snippets/token-service/"
VERDICTS = "/run/token-service-verdicts"
#: nginx's workers write the verdict cache in the test's folder, which only its owner may
#: enter: as root, they run as root too (the directive is ignored otherwise).
USER = "user root;\n" if os.geteuid() == 0 else ""


def nginx_binary() -> str | None:
    return shutil.which("nginx", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def site_config(
    nginx_port: int, backend_port: int, access_log: Path, metrics_network: str | None = None
) -> str:
    """Return the shipped site config with this test's ports, log file and metrics network."""
    text = SITE.read_text()
    replacements = [
        ("listen 80 default_server;", f"listen 127.0.0.1:{nginx_port} default_server;"),
        ("    listen [::]:80 default_server;\n", ""),  # the tests listen on 127.0.0.1 only
        ("server 127.0.0.1:8080;", f"server 127.0.0.1:{backend_port};"),
        ("/var/log/nginx/token-service.access.log", str(access_log)),
        ("/var/log/nginx/error.log", str(access_log.parent / "error.log")),
    ]
    if metrics_network is not None:
        replacements.append(("allow 127.0.0.0/8;", f"allow {metrics_network};"))
    for old, new in replacements:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


@dataclass
class Nginx:
    url: str
    port: int
    process: subprocess.Popen
    prefix: Path

    def stop(self) -> None:
        stop_process(self.process)


def start_gateway_nginx(
    prefix: Path, service_port: int, gateway_site: Callable[[int], str], http: str = ""
) -> Nginx:
    """Start nginx with token-service.conf (its upstream), the gateway server that
    ``gateway_site`` returns for its port, and the directives ``http`` at the http level."""
    binary = nginx_binary()
    require_tool(binary is not None, "nginx", "apt-get install nginx")
    assert binary is not None
    prefix.mkdir()
    port = free_port()
    (prefix / "site.conf").write_text(
        site_config(free_port(), service_port, prefix / "service-access.log")
    )
    (prefix / "gateway.conf").write_text(gateway_site(port))
    process = run_nginx(
        prefix,
        f"{http}\ninclude {prefix}/site.conf;\ninclude {prefix}/gateway.conf;",
        f"http://127.0.0.1:{port}/_ready",
    )
    return Nginx(f"http://127.0.0.1:{port}", port, process, prefix)


def run_nginx(prefix: Path, http: str, ready_url: str) -> subprocess.Popen:
    """Start Debian's nginx in ``prefix``, a folder of its own, with ``http`` in its http
    block, and return it once ``ready_url`` answers (stopped, and raising, if it never does)."""
    binary = nginx_binary()
    require_tool(binary is not None, "nginx", "apt-get install nginx")
    assert binary is not None
    temp_paths = "\n".join(
        f"{kind}_temp_path {prefix}/{kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    (prefix / "nginx.conf").write_text(
        f"{USER}daemon off;\nworker_processes 1;\npid {prefix}/nginx.pid;\n"
        f"error_log {prefix}/error.log warn;\nevents {{ worker_connections 128; }}\n"
        f"http {{\n{temp_paths}\naccess_log off;\n{http}\n}}\n"
    )
    error_log = prefix / "error.log"
    process = subprocess.Popen(
        [binary, "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-e", str(error_log)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(error_log.read_text())
        try:
            requests.get(ready_url, timeout=3)
            return True
        except requests.RequestException:
            return False

    try:
        wait_until(ready, 15, "nginx")
    except BaseException:
        stop_process(process)
        raise
    return process
