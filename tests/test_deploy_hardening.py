"""Safe deployment defaults: compose binds, limits, secrets and hardening, the hardened
pod, the NetworkPolicy.

Static checks on the files, as in test_deploy.py: no Docker engine or cluster runs
here. They prove that docker-compose.yml is valid under the Compose Specification's
JSON schema (vendored in deploy/schema/), that every port is published on loopback
unless a variable says otherwise, that every service has limits, that the secrets
reach the containers as files kept out of git and of the image, and that the compose
gateways and the Kubernetes manifests set the fields that harden the gateway. They do
not prove that the limits fit a real model, nor that the container starts on a
read-only root: every path we know vLLM, torch and Triton write is checked to lie on
a volume (or, in compose, a tmpfs).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gateway.settings import SECRET_FIELDS
from tests.test_deploy_secrets import mounted_secret

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
COMPOSE_SCHEMA = DEPLOY / "schema" / "compose-spec.json"
# The compose variable every service's published address comes from.
BIND_VARS = {
    "gateway-gpu": "GATEWAY_BIND",
    "gateway-cpu": "GATEWAY_BIND",
    "prometheus": "PROMETHEUS_BIND",
    "grafana": "GRAFANA_BIND",
    "redis": "REDIS_BIND",
}
GATEWAYS = ("gateway-gpu", "gateway-cpu")
SECRETS_DIR = DEPLOY / "secrets"
# Every path a library in the gateway's image is known to write, by the variable naming it.
WRITERS = {
    "DLFP_MODEL_CACHE_DIR",  # the converted model
    "HOME",  # ~/.triton, ~/.nv, ~/.config/vllm, the image's WORKDIR
    "TMPDIR",
    "XDG_CACHE_HOME",
    "HF_HOME",
    "VLLM_CACHE_ROOT",  # torch.compile artefacts of vLLM
    "VLLM_CONFIG_ROOT",
    "TRITON_CACHE_DIR",
    "TORCHINDUCTOR_CACHE_DIR",
    "CUDA_CACHE_PATH",
}
_VAR = re.compile(r"\$\{(\w+)(?:(:?)([-?])([^}]*))?\}")
_DEFAULTED = re.compile(r"^\$\{(\w+):-([^}]+)\}$")


def _dotenv() -> dict[str, str]:
    lines = (ROOT / ".env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))


def interpolate(node: Any, env: Mapping[str, str]) -> Any:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?error}`` substitution."""
    if isinstance(node, dict):
        return {key: interpolate(value, env) for key, value in node.items()}
    if isinstance(node, list):
        return [interpolate(value, env) for value in node]
    if not isinstance(node, str):
        return node

    def substitute(match: re.Match[str]) -> str:
        name, colon, op, word = match.groups()
        value = env.get(name)
        is_unset = value is None or (colon == ":" and value == "")
        if op == "?" and is_unset:
            raise KeyError(f"{name}: {word}")
        if op == "-" and is_unset:
            return str(word)
        return value or ""

    return _VAR.sub(substitute, node)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "docker-compose.yml").read_text()))


@pytest.fixture(scope="module")
def compose_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(COMPOSE_SCHEMA.read_text())
    # The file says draft-07 (as "https://json-schema.org/draft-07/schema", without the
    # trailing "#" that jsonschema looks the draft up by).
    assert "draft-07" in schema["$schema"]
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


# --- docker compose ---


def test_compose_validates_against_the_compose_specification(
    compose: dict[str, Any], compose_validator: jsonschema.protocols.Validator
) -> None:
    compose_validator.validate(compose)
    resolved = interpolate(compose, _dotenv())
    compose_validator.validate(resolved)
    # The schema has teeth: a misspelt service key is refused.
    broken = json.loads(json.dumps(resolved))
    broken["services"]["gateway-gpu"]["stop_grace_periods"] = "45s"
    assert not compose_validator.is_valid(broken)


def test_compose_secrets_are_files_out_of_git_and_the_image(compose: dict[str, Any]) -> None:
    secrets = compose["secrets"]
    assert set(secrets) == {
        "admin_token",
        "api_keys",
        "metrics_token",
        "grafana_admin_password",
        "redis_url",
        "redis_password",
    }
    for name, secret in secrets.items():
        assert set(secret) == {"file"}, f"{name}: a file, not an environment variable"
        assert secret["file"] == f"${{SECRETS_DIR:-./deploy/secrets}}/{name}"
        assert interpolate(secret["file"], {}) == f"./deploy/secrets/{name}"
        assert interpolate(secret["file"], {"SECRETS_DIR": "/srv/s"}) == f"/srv/s/{name}"
    # A gateway secret names a setting: DLFP_<NAME>_FILE reads /run/secrets/<name>.
    for name in GATEWAYS:
        for secret in compose["services"][name]["secrets"]:
            assert secret in SECRET_FIELDS
    used = {s for service in compose["services"].values() for s in service.get("secrets", [])}
    assert used == set(secrets)
    # The default directory keeps every file but its own .gitignore out of git, and the
    # image builds from a context without deploy/.
    ignored = (SECRETS_DIR / ".gitignore").read_text().split()
    assert "*" in ignored and "!.gitignore" in ignored
    dockerignore = (ROOT / ".dockerignore").read_text().split()
    assert "deploy" in dockerignore
    # No service takes a secret from an environment variable any more.
    for name, service in compose["services"].items():
        env = service.get("environment", {})
        plain = [k for k in env if re.search("TOKEN|PASSWORD|KEYS", k) and k[-5:] != "_FILE"]
        assert not plain, f"{name} takes {plain} from the environment"


@pytest.mark.parametrize("name", GATEWAYS)
def test_compose_gateway_is_hardened_like_the_pod(name: str, compose: dict[str, Any]) -> None:
    service = compose["services"][name]
    assert service["security_opt"] == ["no-new-privileges:true"]
    assert service["cap_drop"] == ["ALL"]
    assert service["read_only"] is True
    assert service["init"] is True

    tmpfs = {entry.split(":")[0]: entry.partition(":")[2] for entry in service["tmpfs"]}
    volumes = {volume.split(":")[1] for volume in service["volumes"]}
    writable = set(tmpfs) | volumes
    assert not any(volume.endswith(":ro") for volume in service["volumes"])

    def is_writable(path: str) -> bool:
        return any(Path(path).is_relative_to(mount) for mount in writable)

    env = service["environment"]
    assert set(env) >= WRITERS, sorted(WRITERS - set(env))
    for variable in WRITERS:
        assert is_writable(env[variable]), f"{name}: {variable}={env[variable]} is read-only"
    assert env["VLLM_NO_USAGE_STATS"] == "1"
    # HOME is the image's user's, and the model cache is a volume, not memory.
    assert "uid=10001" in tmpfs[env["HOME"]] and re.search(r"\bsize=\d+[kmg]\b", tmpfs["/tmp"])
    assert not Path(env["DLFP_MODEL_CACHE_DIR"]).is_relative_to(env["HOME"])
    for dockerfile in ("Dockerfile.gpu", "Dockerfile.cpu"):
        text = (DEPLOY / dockerfile).read_text()
        (workdir,) = re.findall(r"^WORKDIR (\S+)$", text, re.MULTILINE)
        assert is_writable(workdir) and re.search(rf"--uid 10001\b.*--home-dir {workdir}", text)
        for variable, value in re.findall(r"\b(XDG_CACHE_HOME|TRITON_CACHE_DIR)=(\S+)", text):
            assert is_writable(value), f"{dockerfile}: {variable}={value}"


@pytest.mark.parametrize("name", ["prometheus", "grafana", "redis"])
def test_compose_monitoring_runs_without_privileges(name: str, compose: dict[str, Any]) -> None:
    service = compose["services"][name]
    assert service["security_opt"] == ["no-new-privileges:true"]
    assert service["cap_drop"] == ["ALL"]


@pytest.mark.parametrize("name", list(BIND_VARS))
def test_compose_publishes_on_loopback_unless_told(name: str, compose: dict[str, Any]) -> None:
    service = compose["services"][name]
    bind = BIND_VARS[name]
    assert service["ports"], f"{name} publishes no port"
    for port in service["ports"]:
        assert port.startswith(f"${{{bind}:-127.0.0.1}}:"), port
    dotenv = _dotenv()
    assert dotenv[bind] == "127.0.0.1"
    for env, host in (({}, "127.0.0.1"), (dotenv, "127.0.0.1"), ({bind: "0.0.0.0"}, "0.0.0.0")):
        for port in interpolate(service["ports"], env):
            assert port.split(":")[0] == host, port


def _memory_bytes(value: str) -> int:
    match = re.fullmatch(r"(\d+)([bkmg])?", value.lower())
    assert match, f"not a compose memory size: {value!r}"
    unit: str = match[2] or "b"
    return int(match[1]) << (10 * "bkmg".index(unit))


@pytest.mark.parametrize("name", list(BIND_VARS))
def test_compose_limits_come_from_dotenv(name: str, compose: dict[str, Any]) -> None:
    limits = compose["services"][name]["deploy"]["resources"]["limits"]
    assert set(limits) == {"cpus", "memory"}
    dotenv = _dotenv()
    for key, raw in limits.items():
        match = _DEFAULTED.match(str(raw))
        assert match, f"{name}.{key}: spell it ${{VAR:-default}}, not {raw!r}"
        variable, default = match.groups()
        assert dotenv[variable] == default, f".env documents {variable}={default}"
    resolved = interpolate(limits, dotenv)
    assert float(resolved["cpus"]) > 0
    assert _memory_bytes(resolved["memory"]) >= 256 * 1024**2


def test_compose_cpu_gateway_memory_holds_its_kv_cache(compose: dict[str, Any]) -> None:
    service = compose["services"]["gateway-cpu"]
    kv_gib = int(interpolate(service["environment"]["DLFP_KV_CACHE_GIB"], {}))
    memory = interpolate(service["deploy"]["resources"]["limits"]["memory"], _dotenv())
    assert _memory_bytes(memory) >= (kv_gib + 2) * 1024**3


def test_deploy_readme_says_how_to_open_up() -> None:
    readme = (DEPLOY / "README.md").read_text()
    names = ("DLFP_API_KEYS", "DLFP_ADMIN_TOKEN", "DLFP_METRICS_TOKEN", "SECRETS_DIR", "api_open")
    for name in (*names, *set(BIND_VARS.values())):
        assert name in readme, f"deploy/README.md does not mention {name}"
    assert "No Docker engine or Kubernetes cluster" in readme


# --- Kubernetes ---


def _k8s_docs(kind: str) -> list[dict[str, Any]]:
    docs = [d for p in sorted(K8S.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text())]
    return [d for d in docs if d and d["kind"] == kind]


@pytest.fixture(scope="module")
def pod() -> dict[str, Any]:
    (deployment,) = _k8s_docs("Deployment")
    return dict(deployment["spec"]["template"]["spec"])


def test_k8s_container_is_hardened(pod: dict[str, Any]) -> None:
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security.get("privileged", False) is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert security["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False


def test_k8s_every_writable_path_is_a_volume(pod: dict[str, Any]) -> None:
    (container,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert {m["name"] for m in container["volumeMounts"]} <= set(volumes)
    # Every volume is writable but the Secret's (tests/test_deploy_secrets.py).
    writable = [m for m in container["volumeMounts"] if "secret" not in volumes[m["name"]]]
    assert not any(m.get("readOnly") for m in writable)
    mounts = {m["mountPath"]: m["name"] for m in writable}

    def on_a_volume(path: str) -> bool:
        return any(Path(path).is_relative_to(mount) for mount in mounts)

    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    assert set(env) >= WRITERS, sorted(WRITERS - set(env))
    for name in WRITERS:
        assert on_a_volume(env[name]), f"{name}={env[name]} is on the read-only root"
    assert "/tmp" in mounts and "/dev/shm" in mounts
    assert env["VLLM_NO_USAGE_STATS"] == "1"

    # The image's own writable paths (Dockerfile ENV and WORKDIR) are covered too.
    dockerfile = (DEPLOY / "Dockerfile.gpu").read_text()
    for name in ("XDG_CACHE_HOME", "TRITON_CACHE_DIR", "DLFP_MODEL_CACHE_DIR"):
        match = re.search(rf"\b{name}=(\S+)", dockerfile)
        assert match and on_a_volume(match[1]), name
    (workdir,) = re.findall(r"^WORKDIR (\S+)$", dockerfile, re.MULTILINE)
    assert on_a_volume(workdir) and env["HOME"] == workdir


def test_k8s_secrets_are_required_keys_of_one_secret(pod: dict[str, Any]) -> None:
    (container,) = pod["containers"]
    files = {e["name"]: e["value"] for e in container["env"] if e["name"].endswith("_FILE")}
    assert set(files) == {
        "DLFP_ADMIN_TOKEN_FILE",
        "DLFP_API_KEYS_FILE",
        "DLFP_METRICS_TOKEN_FILE",
        "DLFP_REDIS_URL_FILE",
    }
    # NOTE: mounted_secret fails on an optional Secret or an unlisted key: a Secret without
    # one of the keys stops the pod; none may leave /v1 open silently.
    refs = {name: mounted_secret(pod, container, path) for name, path in files.items()}
    assert len({secret for secret, _ in refs.values()}) == 1
    assert len({key for _, key in refs.values()}) == len(refs)
    assert {name[len("DLFP_") : -len("_FILE")].lower() for name in refs} <= set(SECRET_FIELDS)
    assert not [e for e in container["env"] if "valueFrom" in e]


def test_k8s_network_policy_admits_only_the_gateway_port(pod: dict[str, Any]) -> None:
    (policy,) = _k8s_docs("NetworkPolicy")
    (deployment,) = _k8s_docs("Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    (rule,) = policy["spec"]["ingress"]
    admitted, probe = rule["ports"]
    assert admitted["protocol"] == "TCP" and admitted["port"] in ports
    # The probe port answers /health and /ready only (gateway/connections.py).
    assert probe == {"port": "probe", "protocol": "TCP"} and ports["probe"] == 8001
    # The Prometheus scrape goes to the same port.
    (monitor,) = _k8s_docs("ServiceMonitor")
    (service,) = _k8s_docs("Service")
    (endpoint,) = monitor["spec"]["endpoints"]
    (service_port,) = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    assert service_port["targetPort"] == admitted["port"]


def test_k8s_redis_is_what_the_gateways_url_names() -> None:
    """The Service the documented redis-url names, its password from a Secret, and
    ingress from the gateway pods only."""
    docs = [d for d in yaml.safe_load_all((K8S / "redis" / "redis.yaml").read_text()) if d]
    by_kind = {d["kind"]: d for d in docs}
    assert set(by_kind) == {"Deployment", "Service", "NetworkPolicy"}
    readme = (DEPLOY / "README.md").read_text()
    assert f"@{by_kind['Service']['metadata']['name']}:6379/0" in readme
    redis_pod = by_kind["Deployment"]["spec"]["template"]["spec"]
    (container,) = redis_pod["containers"]
    (path,) = re.findall(r"\$\(cat (/\S+)\)", " ".join(container["command"]))
    assert mounted_secret(redis_pod, container, path) == ("dlfp-redis", "password")
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    (rule,) = by_kind["NetworkPolicy"]["spec"]["ingress"]
    (source,) = rule["from"]
    assert source["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "dlfp-gateway"}
    (kustomization,) = yaml.safe_load_all((K8S / "redis" / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["redis.yaml"]
