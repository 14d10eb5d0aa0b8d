"""The container image, built from a clean clone with `make image` and run with podman as
users run it: read-only, on a volume, reached through a published port.

The image is built once for the module (tests/helpers/containers.py says how it is built
on a machine without a registry); each test runs containers of its own.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest
import requests
import yaml

from tests.helpers.containers import (
    TOOLS,
    clean_clone,
    download_wheelhouse,
    ensure_base_image,
    missing_tools,
    podman,
    podman_environment,
)
from tests.helpers.servers import free_port, wait_until
from tests.helpers.tools import ROOT, require_tool

pytestmark = pytest.mark.container

INSTANCE = "/var/lib/token-service"
CONFIGMAP = ROOT / "deploy" / "kubernetes" / "base" / "configmap.yaml"
DEPLOYMENT = ROOT / "deploy" / "kubernetes" / "base" / "deployment.yaml"
USERS_FILE = f"{INSTANCE}/users.json"
PASSWORD = "correct horse battery staple"
#: gunicorn's graceful_timeout (app/serving/gunicorn_config.py), and the stop timeout the
#: tests give podman: beyond gunicorn's, so that podman never needs SIGKILL.
GRACEFUL_TIMEOUT = 20
STOP_TIMEOUT = GRACEFUL_TIMEOUT + 5


@dataclass
class Image:
    name: str
    env: dict[str, str]
    build_seconds: float  # make image
    total_seconds: float  # the base stand-in, the clone and the wheelhouse too
    names: list[str] = field(default_factory=list)  # containers and volumes to remove

    def unique(self, kind: str) -> str:
        name = f"token-service-test-{kind}-{uuid.uuid4().hex[:8]}"
        self.names.append(name)
        return name


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Image]:
    """Build the image from a clean clone of HEAD with `make image`, once."""
    missing = missing_tools()
    require_tool(not missing, ", ".join(TOOLS), f"apt-get install {' '.join(missing)}")
    folder = tmp_path_factory.mktemp("container")
    env = podman_environment(folder)
    name = f"localhost/token-service-test:{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    # The stand-in for the base image (what a registry would serve) is made meanwhile.
    with ThreadPoolExecutor(1) as executor:
        base = executor.submit(ensure_base_image, env, folder)
        clone = clean_clone(folder / "clone")
        shutil.move(download_wheelhouse(folder), clone / "wheelhouse")
        base.result()
    building = time.monotonic()
    built = subprocess.run(
        ["make", "image", f"IMAGE={name}", "CONTAINER_ENGINE=podman"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    finished = time.monotonic()
    built_image = Image(name, env, finished - building, finished - started)
    yield built_image
    for leftover in built_image.names:
        podman(env, "rm", "--force", "--volumes", "--ignore", leftover, check=False)
        podman(env, "volume", "rm", "--force", leftover, check=False)
    podman(env, "rmi", "--force", name, check=False)


@dataclass
class Container:
    """One container of the image, its instance folder on a named volume."""

    image: Image
    volume: str
    settings: dict[str, str]
    name: str = ""
    port: int = 0

    def start(self) -> Container:
        self.name = self.image.unique("container")
        self.port = free_port()
        options = [f"--env={name}={value}" for name, value in self.settings.items()]
        podman(
            self.image.env, "run", "--detach", "--name", self.name,
            # as Kubernetes' readOnlyRootFilesystem: no tmpfs of podman's own on /tmp
            "--read-only", "--read-only-tmpfs=false",
            "--health-interval=disable",  # no timer (systemd's); `healthcheck run` still runs it
            f"--stop-timeout={STOP_TIMEOUT}",
            f"--publish=127.0.0.1:{self.port}:8080",
            f"--volume={self.volume}:{INSTANCE}", *options, self.image.name,
        )  # fmt: skip
        wait_until(self.answers, 30, f"container {self.name}")
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def answers(self) -> bool:
        state = podman(self.image.env, "inspect", "--format", "{{.State.Status}}", self.name)
        assert state.stdout.strip() == "running", self.logs()
        try:
            return requests.get(f"{self.url}/healthz", timeout=3).status_code == 200
        except requests.RequestException:
            return False

    def logs(self) -> str:
        result = podman(self.image.env, "logs", self.name, check=False)
        return result.stdout + result.stderr

    def exec(self, *command: str) -> subprocess.CompletedProcess[str]:
        return podman(self.image.env, "exec", self.name, *command, check=False)

    def stop(self) -> float:
        """Stop it as a container engine does (SIGTERM), and return the seconds it took."""
        started = time.monotonic()
        podman(self.image.env, "stop", f"--time={STOP_TIMEOUT}", self.name, timeout=60)
        return time.monotonic() - started

    def exit_code(self) -> int:
        state = podman(self.image.env, "inspect", "--format", "{{.State.ExitCode}}", self.name)
        return int(state.stdout)


@pytest.fixture
def volume(image: Image) -> str:
    """Return a new named volume, with a user alice in its users file."""
    name = image.unique("volume")
    podman(image.env, "volume", "create", name)
    podman(
        image.env, "run", "--rm", "--interactive", "--read-only",
        f"--volume={name}:{INSTANCE}", *(f"--env={key}={value}" for key, value in SETTINGS.items()),
        image.name, "token-service", "users", "add", "alice",
        input=PASSWORD + "\n",
    )  # fmt: skip
    return name


SETTINGS = {"BEHIND_PROXY": "true", "USERS_FILE": USERS_FILE}


@pytest.fixture
def container(image: Image, volume: str) -> Container:
    return Container(image, volume, SETTINGS).start()


def log_in(url: str) -> dict[str, str]:
    answer = requests.post(
        f"{url}/login", json={"username": "alice", "password": PASSWORD}, timeout=10
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def refresh(url: str, refresh_token: str) -> requests.Response:
    return requests.post(
        f"{url}/token", json={"username": "alice", "refreshToken": refresh_token}, timeout=10
    )


def test_the_image_builds_from_a_clean_clone_within_five_minutes(image):
    print(
        f"\nmake image: {image.build_seconds:.0f} s; with the base stand-in, the clone and"
        f" the wheelhouse: {image.total_seconds:.0f} s"
    )
    assert image.build_seconds < 300


def test_the_build_installs_requirements_txt_with_its_hashes_and_keeps_only_the_virtualenv():
    text = (ROOT / "Containerfile").read_text().replace("\\\n", " ")
    assert re.search(r"pip install [^\n]*--require-hashes [^\n]*-r requirements\.txt", text)
    final = text.rsplit("\nFROM ", 1)[1]
    assert re.findall(r"^COPY .*", final, re.M) == [
        "COPY --from=build /opt/token-service /opt/token-service"
    ]


def test_the_image_keeps_nothing_of_the_build_and_runs_unprivileged(image):
    config = podman(image.env, "image", "inspect", "--format", "json", image.name).stdout
    (inspected,) = json.loads(config)
    settings = inspected["Config"]
    assert settings["User"] == "10001:10001"
    assert list(settings["Volumes"]) == [INSTANCE]
    healthcheck = inspected.get("Healthcheck") or settings["Healthcheck"]  # podman's, docker's
    assert "/healthz" in " ".join(healthcheck["Test"])
    assert settings["StopSignal"] in ("SIGTERM", "15")
    assert "HOST=0.0.0.0" in settings["Env"]
    assert not any(variable.startswith("BEHIND_PROXY=") for variable in settings["Env"])
    probe = (
        "for program in gcc cc make pip pip3; do command -v $program; done;"
        " python3 -c 'import pip' 2>/dev/null && echo pip-module;"
        " python3 -c 'import setuptools' 2>/dev/null && echo setuptools-module;"
        " find / -xdev \\( -name '*.whl' -o -name wheelhouse -o -path '*/.cache/pip'"
        " -o -path '*/site-packages/tests' -o -path '*/tests/deploy' -o -path /build \\)"
        " -print 2>/dev/null;"
        " true"
    )
    leftovers = podman(image.env, "run", "--rm", "--entrypoint", "sh", image.name, "-c", probe)
    assert leftovers.stdout.split() == []


def test_healthz_and_login_refresh_revoke_from_the_host(container):
    assert requests.get(f"{container.url}/healthz", timeout=5).json() == {"status": "ok"}
    assert podman(container.image.env, "healthcheck", "run", container.name).returncode == 0
    tokens = log_in(container.url)
    assert refresh(container.url, tokens["refreshToken"]).status_code == 200
    revoked = requests.delete(f"{container.url}/token/{tokens['refreshToken']}", timeout=10)
    assert revoked.status_code == 204
    assert refresh(container.url, tokens["refreshToken"]).status_code == 401
    wrong = requests.post(
        f"{container.url}/login", json={"username": "alice", "password": "wrong"}, timeout=10
    )
    assert wrong.status_code == 401  # USERS_FILE on the volume is what logs in


def test_it_runs_as_uid_10001_on_a_read_only_root_filesystem(container):
    assert container.exec("id", "-u").stdout.strip() == "10001"
    processes = container.exec("sh", "-c", "cat /proc/[0-9]*/status | grep '^Uid:'").stdout
    assert {line.split()[1] for line in processes.splitlines()} == {"10001"}
    for path in ("/x", "/tmp/x", "/opt/token-service/x", "/etc/x"):
        written = container.exec("touch", path)
        assert written.returncode != 0, path
        assert "Read-only file system" in written.stderr, written.stderr
    assert container.exec("touch", f"{INSTANCE}/x").returncode == 0  # the volume alone


def test_tokens_and_the_signing_secret_survive_a_restart_on_the_same_volume(image, volume):
    first = Container(image, volume, SETTINGS).start()
    tokens = log_in(first.url)
    first.stop()
    second = Container(image, volume, SETTINGS).start()
    assert refresh(second.url, tokens["refreshToken"]).status_code == 200
    mine = requests.get(
        f"{second.url}/user-accessible",
        headers={"Authorization": f"Bearer {tokens['accessToken']}"},
        timeout=10,
    )
    assert mine.status_code == 200, mine.text  # signed before the restart, still verified


def test_sigterm_answers_the_request_in_flight_then_stops_within_the_graceful_timeout(
    container,
):
    body = b'{"username": "alice", "password": "' + PASSWORD.encode() + b'"}'
    with socket.create_connection(("127.0.0.1", container.port), timeout=30) as client:
        client.sendall(
            b"POST /login HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body[:10]
        )
        time.sleep(0.5)  # a worker's thread has the request, and waits for the body
        started = time.monotonic()
        podman(container.image.env, "kill", "--signal", "TERM", container.name)
        time.sleep(2)  # gunicorn is stopping: the body trickles in meanwhile
        assert (
            podman(
                container.image.env, "inspect", "--format", "{{.State.Status}}", container.name
            ).stdout.strip()
            == "running"
        )
        client.sendall(body[10:])
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = client.recv(65536)
            assert chunk, answer
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    podman(container.image.env, "wait", container.name, timeout=STOP_TIMEOUT + 10)
    assert time.monotonic() - started < GRACEFUL_TIMEOUT
    assert container.exit_code() == 0, container.logs()
    assert "Shutting down" in container.logs()


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        pytest.param({}, "configuration error: HOST=0.0.0.0 listens beyond", id="no proxy"),
        pytest.param({**SETTINGS, "PORT": "eighty"}, "configuration error: PORT", id="bad port"),
        pytest.param({"BEHIND_PROXY": "true"}, "configuration error: ", id="no users file"),
    ],
)
def test_a_missing_or_bad_setting_exits_with_the_services_one_line_error(image, settings, named):
    name = image.unique("refused")
    options = [f"--env={key}={value}" for key, value in settings.items()]
    podman(image.env, "run", "--detach", "--read-only", "--health-interval=disable",
           "--name", name, *options, image.name)  # fmt: skip
    podman(image.env, "wait", name, timeout=60)
    state = podman(image.env, "inspect", "--format", "{{.State.ExitCode}}", name)
    logs = podman(image.env, "logs", name)
    assert int(state.stdout) == 1
    (line,) = (logs.stdout + logs.stderr).splitlines()
    assert line.startswith(named), line


def test_it_starts_on_an_empty_folder_of_another_user_writable_by_all_with_the_configmap(
    image, tmp_path
):
    """As on Kubernetes: an emptyDir on the instance volume (root's, mode 0777), and the
    ConfigMap's config.toml (deploy/kubernetes/base/configmap.yaml) mounted read-only as
    CONFIG_FILE at the mode the Deployment gives it, its users file aside. The service refuses
    such a folder as its instance folder; the Deployment names one inside it."""
    empty_dir = tmp_path / "empty-dir"
    empty_dir.mkdir()
    empty_dir.chmod(0o777)
    (configmap,) = yaml.safe_load_all(CONFIGMAP.read_text())
    # the Deployment's variables (CONFIG_FILE, INSTANCE_PATH), the Secrets' aside, and the
    # mode its volume gives the ConfigMap's file
    (deployment,) = yaml.safe_load_all(DEPLOYMENT.read_text())
    pod = deployment["spec"]["template"]["spec"]
    (pod_container,) = pod["containers"]
    (volume,) = [item["configMap"] for item in pod["volumes"] if "configMap" in item]
    config = tmp_path / "config.toml"
    config.write_text(configmap["data"]["config.toml"])
    config.chmod(volume["defaultMode"])
    variables = {item["name"]: item["value"] for item in pod_container["env"] if "value" in item}
    settings = {**variables, "USERS_FILE": f"{INSTANCE}/users.json"}
    config_file = settings["CONFIG_FILE"]
    name = image.unique("emptydir")
    port = free_port()
    podman(
        image.env, "run", "--detach", "--name", name, "--read-only", "--read-only-tmpfs=false",
        "--health-interval=disable", f"--volume={empty_dir}:{INSTANCE}",
        f"--volume={config}:{config_file}:ro", f"--publish=127.0.0.1:{port}:8080",
        *(f"--env={key}={value}" for key, value in settings.items()), image.name,
    )  # fmt: skip
    container = Container(image, "", settings, name=name, port=port)
    wait_until(container.answers, 30, f"container {name}")
    owner = container.exec("stat", "-c", "%u %a", settings["INSTANCE_PATH"]).stdout.split()
    assert owner == ["10001", "700"]
