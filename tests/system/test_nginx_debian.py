"""docs/deployment.md's nginx steps, run on a copy of Debian's stock /etc/nginx.

The copy is the installed package's own layout (nginx.conf including conf.d/ and
sites-enabled/, the stock default site enabled). The steps run as written, but for
/etc/nginx, which is the copy; the test then rewrites only what it must to run nginx
unprivileged on loopback: ports, the pid file, logs and temporary folders.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.helpers.docs import marked_block
from tests.helpers.nginx import nginx_binary
from tests.helpers.servers import Gunicorn, free_port, stop_process, wait_until
from tests.helpers.tools import ROOT, require_tool

pytestmark = [pytest.mark.nginx, pytest.mark.gunicorn, pytest.mark.store("sqlite")]

STOCK = Path("/etc/nginx")
DEPLOYMENT = ROOT / "docs" / "deployment.md"
#: The step that reloads the system's nginx: the test starts its own instead.
RELOAD = "nginx -t && systemctl reload nginx"


def documented_steps() -> list[str]:
    """Return the documented nginx steps but the reload, comments dropped."""
    lines = marked_block(DEPLOYMENT.read_text(), "nginx-site").splitlines()
    steps = [line.split("#", 1)[0].strip() for line in lines]
    assert RELOAD in steps, "the steps no longer end with nginx's check and reload"
    return [step for step in steps if step and step != RELOAD]


def replace_each(path: Path, replacements: list[tuple[str, str]]) -> None:
    text = path.read_text()
    for old, new in replacements:
        assert old in text, f"{path.name} no longer holds {old!r}"
        text = text.replace(old, new)
    path.write_text(text)


def copy_of_stock_nginx(folder: Path) -> Path:
    require_tool(
        nginx_binary() is not None and (STOCK / "sites-enabled" / "default").exists(),
        "Debian's nginx with its stock default site",
        "apt-get install nginx",
    )
    etc = folder / "etc-nginx"
    shutil.copytree(STOCK, etc, symlinks=True)
    # The stock site's link is absolute: point it at the copy.
    default = etc / "sites-enabled" / "default"
    if default.is_symlink():
        default.unlink()
        default.symlink_to(etc / "sites-available" / "default")
    return etc


def run_steps(steps: list[str], etc: Path) -> None:
    """Run the steps in a shell from the repository's root, on the copy of /etc/nginx."""
    script = "set -e\n" + "\n".join(step.replace("/etc/nginx", str(etc)) for step in steps)
    subprocess.run(["sh", "-c", script], cwd=ROOT, check=True, timeout=30)


def localise(etc: Path, port: int, backend_port: int) -> None:
    """Rewrite what an unprivileged nginx on loopback needs: ports, pid, logs, temp files."""
    logs = etc.parent / "logs"
    logs.mkdir(exist_ok=True)
    temp_paths = "".join(
        f"\t{kind}_temp_path {etc.parent}/{kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    replace_each(
        etc / "nginx.conf",
        [
            ("user www-data;\n", ""),
            ("pid /run/nginx.pid;", f"pid {etc.parent}/nginx.pid;"),
            ("/var/log/nginx/", f"{logs}/"),
            ("include /etc/nginx/", f"include {etc}/"),
            ("http {\n", f"http {{\n{temp_paths}"),
        ],
    )
    for site in (etc / "sites-available" / "default", etc / "conf.d" / "token-service.conf"):
        if site.exists():
            replace_each(
                site,
                [
                    ("listen 80 default_server;", f"listen 127.0.0.1:{port} default_server;"),
                    ("listen [::]:80 default_server;", ""),
                ],
            )
    site = etc / "conf.d" / "token-service.conf"
    if site.exists():
        replace_each(
            site,
            [
                ("server 127.0.0.1:8080;", f"server 127.0.0.1:{backend_port};"),
                ("/var/log/nginx/", f"{logs}/"),
            ],
        )


def nginx_command(etc: Path, *arguments: str) -> list[str]:
    binary = nginx_binary()
    assert binary is not None
    error_log = str(etc.parent / "logs" / "error.log")
    # nginx's own prefix (Debian's), which a load_module line of modules-enabled/ is relative to
    return [binary, "-c", str(etc / "nginx.conf"), "-e", error_log, *arguments]


@pytest.fixture
def backend(gunicorn_server) -> Gunicorn:
    return gunicorn_server({"TRUSTED_PROXIES": "127.0.0.1/32", "OPEN_LOGIN": "true"}, workers=1)


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen]]:
    processes: list[subprocess.Popen] = []
    yield processes
    for process in processes:
        stop_process(process)


def test_the_documented_steps_make_a_stock_debian_nginx_serve_the_service(
    tmp_path, backend, started
):
    etc = copy_of_stock_nginx(tmp_path)
    run_steps(documented_steps(), etc)
    assert not (etc / "sites-enabled" / "default").exists()
    assert (etc / "sites-available" / "default").exists()  # kept, to enable again
    port = free_port()
    localise(etc, port, backend.port)
    checked = subprocess.run(nginx_command(etc, "-t"), capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr
    process = subprocess.Popen(
        nginx_command(etc, "-g", "daemon off;"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started.append(process)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert process.poll() is None, (tmp_path / "logs" / "error.log").read_text()
        try:
            requests.get(url, timeout=2)
        except requests.RequestException:
            return False
        return True

    wait_until(ready, 15, "nginx")
    for host in ("127.0.0.1", "auth.example.com", "localhost"):
        response = requests.get(f"{url}/healthz", headers={"Host": host}, timeout=10)
        assert response.status_code == 200, (host, response.text)
        assert response.json() == {"status": "ok"}
    response = requests.post(f"{url}/login", data={"username": "alice"}, timeout=10)
    assert response.status_code == 200
    assert "refreshToken" in response.json()


def test_nginx_refuses_the_site_while_the_stock_default_site_is_enabled(tmp_path):
    """Only copied, the site would lose every request to the stock site: nginx -t says so."""
    etc = copy_of_stock_nginx(tmp_path)
    steps = [step for step in documented_steps() if "sites-enabled/default" not in step]
    assert len(steps) == len(documented_steps()) - 1, "no step disables the stock site"
    run_steps(steps, etc)
    localise(etc, free_port(), free_port())
    checked = subprocess.run(nginx_command(etc, "-t"), capture_output=True, text=True, timeout=30)
    assert checked.returncode != 0
    assert "duplicate default server" in checked.stderr
