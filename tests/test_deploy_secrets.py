"""Secrets reach the deployed containers as files, never as environment variables
(quick tier, static checks on the files as in test_deploy.py).

A variable would be inherited by every process the container runs: the gateway's vLLM
engine core and workers and its grammar vetter, and whatever they start. Every manifest
under deploy/k8s is checked: no container takes a Secret through ``env`` or ``envFrom``
or holds a secret setting's value, the gateway's ``DLFP_*_FILE`` paths lie on a
read-only ``secret`` volume that lists each key it needs (so a Secret without one stops
the pod), and the scrape sends the token the gateway reads. In docker-compose.yml no
service's environment holds a secret, and no secret is put on a command line.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from gateway.settings import SECRET_FIELDS

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "k8s"
SECRET_SETTINGS = {f"DLFP_{name.upper()}" for name in SECRET_FIELDS}
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Pod"}


@functools.cache
def manifests() -> list[tuple[str, dict[str, Any]]]:
    """Every document of every manifest under deploy/k8s, with its file's path."""
    return [
        (str(path.relative_to(K8S)), doc)
        for path in sorted(K8S.rglob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if isinstance(doc, dict)
    ]


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    if doc["kind"] == "Pod":
        return dict(doc["spec"])
    if doc["kind"] == "CronJob":
        return dict(doc["spec"]["jobTemplate"]["spec"]["template"]["spec"])
    return dict(doc["spec"]["template"]["spec"])


def pods() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{where} {d['metadata']['name']}", pod_spec(d))
        for where, d in manifests()
        if d.get("kind") in WORKLOADS
    ]


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def mounted_secret(pod: dict[str, Any], container: dict[str, Any], path: str) -> tuple[str, str]:
    """The (Secret, key) whose file ``path`` is in ``container``; fails unless the path
    lies on a read-only ``secret`` volume that lists the key, not as optional."""
    file = PurePosixPath(path)
    (mount,) = [
        m for m in container.get("volumeMounts", []) if file.parent == PurePosixPath(m["mountPath"])
    ]
    assert mount.get("readOnly") is True, f"{path}: the secret volume is not read-only"
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    secret = volume.get("secret")
    assert secret is not None, f"{path} is on volume {volume['name']}, not a secret volume"
    assert not secret.get("optional", False), f"{path}: an optional Secret may be missing"
    (item,) = [i for i in secret.get("items", []) if i["path"] == file.name]
    return str(secret["secretName"]), str(item["key"])


def _gateway() -> tuple[dict[str, Any], dict[str, Any]]:
    (deployment,) = [
        d
        for _, d in manifests()
        if d.get("kind") == "Deployment" and d["metadata"]["name"] == "dlfp-gateway"
    ]
    pod = pod_spec(deployment)
    (container,) = pod["containers"]
    return pod, container


def test_every_workload_is_checked() -> None:
    names = {where.rsplit(" ", 1)[1] for where, _ in pods()}
    assert {"dlfp-gateway", "dlfp-redis", "dlfp-gateway-epp"} <= names, names


@pytest.mark.parametrize(("where", "pod"), pods(), ids=[where for where, _ in pods()])
def test_no_container_takes_a_secret_from_its_environment(where: str, pod: dict[str, Any]) -> None:
    for container in containers(pod):
        for env in container.get("env", []):
            source = env.get("valueFrom", {})
            assert "secretKeyRef" not in source, f"{where}: {env['name']} is a Secret's key"
            assert env["name"] not in SECRET_SETTINGS, f"{where}: {env['name']} holds a secret"
        for env_from in container.get("envFrom", []):
            assert "secretRef" not in env_from, f"{where}: a whole Secret as variables"


@pytest.mark.parametrize(("where", "pod"), pods(), ids=[where for where, _ in pods()])
def test_secret_files_are_readable_by_the_pod_only(where: str, pod: dict[str, Any]) -> None:
    """Each secret volume's files: not readable by others, and by the container's user
    through the group ``fsGroup`` gives them."""
    for volume in pod.get("volumes", []):
        if "secret" in volume:
            assert volume["secret"]["defaultMode"] & 0o007 == 0, f"{where}: {volume['name']}"
            security = pod["securityContext"]
            assert security.get("fsGroup") == security.get("runAsGroup") is not None, where


def test_the_gateway_reads_each_secret_from_a_file_of_the_secret() -> None:
    pod, container = _gateway()
    files = {e["name"]: e["value"] for e in container["env"] if e["name"].endswith("_FILE")}
    needed = {"DLFP_ADMIN_TOKEN", "DLFP_API_KEYS", "DLFP_METRICS_TOKEN", "DLFP_REDIS_URL"}
    assert set(files) == {f"{name}_FILE" for name in needed}
    sources = {name: mounted_secret(pod, container, path) for name, path in files.items()}
    assert {secret for secret, _ in sources.values()} == {"dlfp-gateway"}
    assert len({key for _, key in sources.values()}) == len(sources)
    # The keys the documented `kubectl create secret` names.
    readme = (ROOT / "deploy" / "README.md").read_text()
    for _, key in sources.values():
        assert f"--from-literal={key}=" in readme, key


def test_the_scrape_sends_the_token_the_gateway_reads() -> None:
    pod, container = _gateway()
    (path,) = [e["value"] for e in container["env"] if e["name"] == "DLFP_METRICS_TOKEN_FILE"]
    secret, key = mounted_secret(pod, container, path)
    (monitor,) = [d for _, d in manifests() if d.get("kind") == "ServiceMonitor"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": secret, "key": key},
    }


def test_redis_reads_its_password_from_a_file_of_its_secret() -> None:
    (deployment,) = [
        d
        for _, d in manifests()
        if d.get("kind") == "Deployment" and d["metadata"]["name"] == "dlfp-redis"
    ]
    pod = pod_spec(deployment)
    (container,) = pod["containers"]
    assert "env" not in container
    script = " ".join(container["command"])
    (path,) = re.findall(r"\$\(cat (/\S+)\)", script)
    assert mounted_secret(pod, container, path) == ("dlfp-redis", "password")
    # Into a config file, never onto redis-server's command line.
    assert "requirepass" in script and "> /tmp/redis.conf" in script


# --- docker compose ---


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker-compose.yml").read_text()))


def test_no_compose_service_takes_a_secret_from_its_environment(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        env = service.get("environment", {})
        names = set(env) if isinstance(env, dict) else {item.split("=", 1)[0] for item in env}
        assert not names & SECRET_SETTINGS, name
        assert not [n for n in names if "PASSWORD" in n and not n.endswith("_FILE")], name


def test_no_compose_command_puts_a_secret_on_a_command_line(compose: dict[str, Any]) -> None:
    """``$(cat /run/secrets/...)`` only as a variable's value or into a config file:
    a command's arguments are in /proc for every user of the host to read."""
    for name, service in compose["services"].items():
        scripts = [*service.get("command", []), *service.get("healthcheck", {}).get("test", [])]
        for script in map(str, scripts):
            for match in re.finditer(r'"\$\$\(cat /run/secrets/\w+\)"', script):
                before, after = script[: match.start()], script[match.end() :]
                assigned = re.search(r"\b[A-Z_]+=$", before) is not None
                into_file = before.rstrip().endswith(
                    "printf 'requirepass %s\\n'"
                ) and after.lstrip().startswith(">")
                assert assigned or into_file, f"{name}: {script}"
