"""nginx as the tests run it: its program, and the shipped site config with a test's own
ports and log files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.helpers.tools import ROOT

SITE = ROOT / "deploy" / "nginx" / "token-service.conf"


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
