"""deploy/kubernetes/: every manifest valid against Kubernetes' schemas (offline, the ones
kubernetes-validate bundles), each overlay rendered and valid, and the Deployment running
the image `make image` builds the way the container tests run it.

The overlays are rendered here by applying their JSON patches to the base, the only
kustomize feature they use; with kubectl on the machine, its kustomize must agree.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from app.config.parsers import ConfigError
from app.config.settings import Settings
from app.serving import gunicorn_config
from tests.helpers.containers import image_name
from tests.helpers.tools import ROOT, require_tool

KUBERNETES = ROOT / "deploy" / "kubernetes"
BASE = KUBERNETES / "base"
OVERLAYS = {"postgres": 5432, "redis": 6379}
#: The oldest Kubernetes release the manifests are checked against, and the newest bundled.
VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]


def documents(path: Path) -> list[dict]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document]


def kustomization(folder: Path) -> dict:
    (found,) = documents(folder / "kustomization.yaml")
    return found


def base_resources() -> list[dict]:
    return [
        resource for name in kustomization(BASE)["resources"] for resource in documents(BASE / name)
    ]


def json_pointer_apply(document: dict, operation: dict) -> None:
    """Apply one JSON patch (RFC 6902) operation, of the kinds the overlays use."""
    *parents, last = operation["path"].lstrip("/").split("/")
    target = document
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    value = copy.deepcopy(operation.get("value"))
    if operation["op"] == "add" and isinstance(target, list):
        target.insert(len(target) if last == "-" else int(last), value)
    elif operation["op"] in ("add", "replace"):
        target[last] = value
    else:
        raise AssertionError(f"an operation this renderer does not know: {operation}")


def rendered(overlay: str) -> list[dict]:
    """Return the overlay's resources: the base, its JSON patches applied."""
    spec = kustomization(KUBERNETES / "overlays" / overlay)
    assert spec["resources"] == ["../../base"]
    assert set(spec) <= {"apiVersion", "kind", "resources", "patches"}
    resources = copy.deepcopy(base_resources())
    for patch in spec["patches"]:
        targets = [
            resource
            for resource in resources
            if resource["kind"] == patch["target"]["kind"]
            and resource["metadata"]["name"] == patch["target"]["name"]
        ]
        assert len(targets) == 1, patch["target"]
        for operation in yaml.safe_load(patch["patch"]):
            json_pointer_apply(targets[0], operation)
    return resources


def by_kind(resources: list[dict], kind: str) -> dict:
    (found,) = [resource for resource in resources if resource["kind"] == kind]
    return found


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("overlay", [None, *OVERLAYS])
def test_every_manifest_is_valid_against_the_kubernetes_schemas(overlay, version):
    resources = base_resources() if overlay is None else rendered(overlay)
    assert {resource["kind"] for resource in resources} == {
        "ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy",
    }  # fmt: skip
    for resource in resources:
        kubernetes_validate.validate(resource, version, strict=True)  # raises when invalid


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kubectls_kustomize_renders_each_overlay_as_the_test_does(overlay):
    require_tool(
        shutil.which("kubectl") is not None,
        "kubectl (its kustomize must read `patches`: 1.21 or newer)",
        "https://kubernetes.io/docs/tasks/tools/ (Debian 12's kubernetes-client is 1.20)",
    )
    output = subprocess.run(
        ["kubectl", "kustomize", str(KUBERNETES / "overlays" / overlay)],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    key = lambda resource: (resource["kind"], resource["metadata"]["name"])  # noqa: E731
    assert sorted(yaml.safe_load_all(output), key=key) == sorted(rendered(overlay), key=key)


@pytest.mark.parametrize(("overlay", "port"), OVERLAYS.items())
def test_each_overlay_lets_the_pods_reach_its_store_and_nothing_else(overlay, port):
    policy = by_kind(rendered(overlay), "NetworkPolicy")
    ports = {(rule["port"], rule["protocol"]) for egress in policy["spec"]["egress"]
             for rule in egress["ports"]}  # fmt: skip
    assert ports == {(53, "UDP"), (53, "TCP"), (port, "TCP")}
    assert [rule.get("to") for rule in policy["spec"]["egress"]] == [None, None]


def test_the_deployment_runs_the_image_make_image_builds_as_the_container_tests_run_it():
    deployment = by_kind(base_resources(), "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == image_name()
    # the store is shared: its outage must not empty the Service (/auth/check needs none)
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert set(container["resources"]) == {"requests", "limits"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001  # the image's user
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
    assert "/var/lib/token-service" in mounts  # the image's one volume, writable
    secrets = {
        variable["name"]: variable["valueFrom"]["secretKeyRef"]["name"]
        for variable in container["env"]
        if "valueFrom" in variable
    }
    assert secrets == {
        "SIGNING_SECRET": "token-service-signing",
        "TOKEN_STORE_URL": "token-service-store",
    }
    assert "envFrom" not in container  # the ConfigMap is the CONFIG_FILE, not variables


def test_a_stopping_pod_keeps_serving_through_its_endpoints_removal_and_in_flight_requests():
    pod = by_kind(base_resources(), "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "/bin/sleep"  # coreutils', in the Debian image; no shell needed
    assert "FROM docker.io/library/debian:" in (ROOT / "Containerfile").read_text()
    pause = int(command[1])
    assert pause >= 5
    graceful_timeout = 20  # app/serving/gunicorn_config.py
    assert gunicorn_config.graceful_timeout == graceful_timeout
    assert pod["terminationGracePeriodSeconds"] >= pause + graceful_timeout + 5


def test_only_the_ingress_controllers_namespace_reaches_the_pods():
    """BEHIND_PROXY=true holds only if no pod reaches gunicorn past the proxy."""
    for resources in [base_resources(), *(rendered(overlay) for overlay in OVERLAYS)]:
        policy = by_kind(resources, "NetworkPolicy")
        assert "Ingress" in policy["spec"]["policyTypes"]
        rules = policy["spec"]["ingress"]
        assert rules
        for rule in rules:
            assert rule.get("from"), rule  # a rule without `from` admits every pod
            for peer in rule["from"]:
                assert set(peer) == {"namespaceSelector"}, peer
                assert peer["namespaceSelector"]["matchLabels"] == {
                    "kubernetes.io/metadata.name": "ingress-nginx"
                }


def configmap_file(pod: dict, configmap: dict) -> tuple[str, str, int]:
    """Return CONFIG_FILE's path in the pod, the ConfigMap key it is, and the file's mode."""
    (container,) = pod["containers"]
    (path,) = [item["value"] for item in container["env"] if item["name"] == "CONFIG_FILE"]
    (volume,) = [
        item for item in pod["volumes"]
        if item.get("configMap", {}).get("name") == configmap["metadata"]["name"]
    ]  # fmt: skip
    (mount,) = [item for item in container["volumeMounts"] if item["name"] == volume["name"]]
    assert mount["readOnly"] is True
    folder, _, key = path.rpartition("/")
    assert folder == mount["mountPath"]
    return path, key, volume["configMap"]["defaultMode"]


def image_environment() -> dict[str, str]:
    """Return the variables the Containerfile's final stage sets with ENV."""
    final = (ROOT / "Containerfile").read_text().rsplit("\nFROM ", 1)[1]
    (block,) = re.findall(r"^ENV ((?:.*\\\n)*.*)$", final, re.MULTILINE)
    pairs = block.replace("\\\n", " ").split()
    return dict(pair.split("=", 1) for pair in pairs)


def test_the_configmaps_file_is_the_services_config_file_and_loads_with_the_secrets_given(
    tmp_path,
):
    """The ConfigMap's config.toml, at the mode its volume gives it, read through the
    CONFIG_FILE the Deployment sets, below the image's variables and the Deployment's
    (the Secrets' among them): what the pod runs with."""
    configmap = by_kind(base_resources(), "ConfigMap")
    pod = by_kind(base_resources(), "Deployment")["spec"]["template"]["spec"]
    path, key, mode = configmap_file(pod, configmap)
    assert set(configmap["data"]) == {key}
    assert mode & 0o022 == 0  # the service refuses a file that others may write
    config = tmp_path / key
    config.write_text(configmap["data"][key])
    config.chmod(mode)
    (container,) = pod["containers"]
    variables = {item["name"]: item["value"] for item in container["env"] if "value" in item}
    secrets = {"SIGNING_SECRET": "s" * 48, "TOKEN_STORE_URL": "redis://redis.example:6379/0"}
    environ = {**image_environment(), **variables, **secrets, "CONFIG_FILE": str(config)}
    assert environ["HOST"] == "0.0.0.0"  # the image's
    try:
        loaded = Settings.load(environ=environ)
    except ConfigError as error:  # pragma: no cover - the message is the failure
        pytest.fail(f"the ConfigMap's settings do not load: {error}")
    assert variables["CONFIG_FILE"] == path
    assert loaded.behind_proxy is True
    assert loaded.users_file == "/etc/token-service/users/users.json"
    assert loaded.web_concurrency == 2
    # inside the emptyDir, not the emptyDir itself (the image's), which the service refuses
    assert loaded.instance_path == "/var/lib/token-service/pod"
    _, origins, _ = Settings.gather({}, environ)
    assert origins["BEHIND_PROXY"] == origins["USERS_FILE"] == "file"
    assert origins["SIGNING_SECRET"] == "environment"


def test_a_secret_in_the_configmaps_file_is_refused_at_its_mode(tmp_path):
    """The file is readable by all in the pod: a secret there stops the service, so the
    Secrets stay environment variables."""
    configmap = by_kind(base_resources(), "ConfigMap")
    pod = by_kind(base_resources(), "Deployment")["spec"]["template"]["spec"]
    _, key, mode = configmap_file(pod, configmap)
    config = tmp_path / key
    config.write_text(configmap["data"][key] + 'SIGNING_SECRET = "' + "s" * 48 + '"\n')
    config.chmod(mode)
    with pytest.raises(ConfigError, match="holds the secret SIGNING_SECRET"):
        Settings.load(environ={"CONFIG_FILE": str(config), "HOST": "0.0.0.0"})
