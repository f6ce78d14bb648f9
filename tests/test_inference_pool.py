"""deploy/k8s/inference-pool/: valid against the vendored CRDs, and wired to the gateway.

The InferencePool and the HTTPRoute are validated offline against the
openAPIV3Schema of the CRDs vendored in deploy/k8s/inference-pool/crds/, with
unknown fields refused (as ``kubectl apply --validate=strict`` would). The CRDs'
CEL rules (``x-kubernetes-validations``) are not evaluated here; the ones these
manifests depend on are checked by hand below. The endpoint picker's config has
no published schema: its metric names are checked against what the gateway exports.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from starlette.routing import Route

from gateway.settings import Settings
from tests.conftest import Server
from tests.fakes import FakeEngine
from tests.http_helpers import fake_app, fake_client
from tests.test_deploy import exported_series

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "k8s"
POOL = K8S / "inference-pool"
CRDS = POOL / "crds"


def _docs(directory: Path) -> list[dict[str, Any]]:
    paths = sorted(directory.glob("*.yaml"))
    return [d for p in paths for d in yaml.safe_load_all(p.read_text()) if d]


def _one(kind: str, directory: Path = POOL) -> dict[str, Any]:
    (doc,) = [d for d in _docs(directory) if d.get("kind") == kind]
    return doc


def json_schema(node: Any) -> Any:
    """A CRD's OpenAPI v3 schema as JSON Schema, strict about unknown fields."""
    if isinstance(node, list):
        return [json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {
        key: json_schema(value)
        for key, value in node.items()
        if key not in ("properties", "nullable") and not key.startswith("x-kubernetes-")
    }
    if "properties" in node:
        out["properties"] = {name: json_schema(s) for name, s in node["properties"].items()}
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    # NOTE: the API server prunes (or, strictly, refuses) unknown fields; JSON Schema
    # allows them unless told, and then a misspelt field would pass silently.
    is_open = "additionalProperties" in node or node.get("x-kubernetes-preserve-unknown-fields")
    if node.get("type") == "object" and "properties" in node and not is_open:
        out["additionalProperties"] = False
    return out


def _crd_validators() -> dict[tuple[str, str], jsonschema.protocols.Validator]:
    validators = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version["served"]:
                schema = json_schema(version["schema"]["openAPIV3Schema"])
                jsonschema.Draft4Validator.check_schema(schema)
                validators[(f"{group}/{version['name']}", kind)] = jsonschema.Draft4Validator(
                    schema
                )
    return validators


@pytest.fixture(scope="module")
def validators() -> dict[tuple[str, str], jsonschema.protocols.Validator]:
    return _crd_validators()


def _errors(validator: jsonschema.protocols.Validator, doc: dict[str, Any]) -> list[str]:
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)
    ]


def test_crds_are_the_vendored_release_versions() -> None:
    pool = yaml.safe_load((CRDS / "inference.networking.k8s.io_inferencepools.yaml").read_text())
    route = yaml.safe_load((CRDS / "gateway.networking.k8s.io_httproutes.yaml").read_text())
    annotations = pool["metadata"]["annotations"]
    assert annotations["inference.networking.k8s.io/bundle-version"] == "v1.6.0"
    assert route["metadata"]["annotations"]["gateway.networking.k8s.io/bundle-version"] == "v1.6.1"
    assert route["metadata"]["annotations"]["gateway.networking.k8s.io/channel"] == "standard"
    readme = (ROOT / "deploy" / "README.md").read_text()
    for path in CRDS.glob("*.yaml"):
        assert path.name in readme, f"deploy/README.md does not say where {path.name} came from"


@pytest.mark.parametrize("kind", ["InferencePool", "HTTPRoute"])
def test_manifest_validates_against_its_crd(
    kind: str, validators: dict[tuple[str, str], jsonschema.protocols.Validator]
) -> None:
    doc = _one(kind)
    validator = validators[(doc["apiVersion"], kind)]
    assert _errors(validator, doc) == []
    # Strict: a misspelt field fails, as it would against the API server.
    typo = copy.deepcopy(doc)
    typo["spec"]["rule" if kind == "HTTPRoute" else "targetPort"] = []
    assert _errors(validator, typo)


def test_the_crd_schemas_have_teeth(
    validators: dict[tuple[str, str], jsonschema.protocols.Validator],
) -> None:
    pool = _one("InferencePool")
    validator = validators[(pool["apiVersion"], "InferencePool")]
    for path, bad in (
        (("spec", "targetPorts"), [{"number": 70000}]),
        (("spec", "targetPorts"), []),
        (("spec", "endpointPickerRef", "failureMode"), "Sometimes"),
        (("spec", "selector"), {"matchLabels": {}}),
    ):
        broken = copy.deepcopy(pool)
        target = broken
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = bad
        assert _errors(validator, broken), f"{'.'.join(path)}={bad!r} passed"


def test_inference_pool_uses_the_ga_api_and_selects_the_gateway_pods() -> None:
    pool = _one("InferencePool")
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    deployment = _one("Deployment", K8S)
    pod = deployment["spec"]["template"]
    assert pool["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    # The serving port; the probe port answers /health and /ready only.
    serving = [p["containerPort"] for p in container["ports"] if p["name"] != "probe"]
    assert [p["number"] for p in pool["spec"]["targetPorts"]] == serving
    # The gateway's NetworkPolicy admits that port: the proxy and the picker's scrape.
    policy = _one("NetworkPolicy", K8S)
    (rule,) = policy["spec"]["ingress"]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    admitted = {named.get(p["port"], p["port"]) for p in rule["ports"]}
    assert admitted - {named["probe"]} == {p["number"] for p in pool["spec"]["targetPorts"]}


def test_endpoint_picker_serves_the_pool() -> None:
    pool, service = _one("InferencePool"), _one("Service")
    deployment, config_generator = _one("Deployment"), _one("Kustomization")
    ref = pool["spec"]["endpointPickerRef"]
    # CEL rule of the CRD: kind Service (the default) needs a port.
    assert ref.get("kind", "Service") == "Service" and "port" in ref
    assert ref["name"] == service["metadata"]["name"]
    (grpc,) = [p for p in service["spec"]["ports"] if p["port"] == ref["port"]["number"]]
    pod = deployment["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    args = dict(arg.removeprefix("--").split("=", 1) for arg in container["args"])
    assert int(args["grpc-port"]) == ports[grpc["targetPort"]]
    assert args["pool-name"] == pool["metadata"]["name"]
    assert args["pool-group"] == pool["apiVersion"].split("/")[0]
    # The config file is the generated ConfigMap, mounted where --config-file points.
    (generated,) = config_generator["configMapGenerator"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    (volume,) = [v for v in pod["spec"]["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == generated["name"]
    assert args["config-file"] == f"{mounts[volume['name']]}/{generated['files'][0]}"
    assert pod["spec"]["serviceAccountName"] == _one("ServiceAccount")["metadata"]["name"]
    granted = {
        (group, resource, verb)
        for rule in _one("Role")["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    for group, resource in ((args["pool-group"], "inferencepools"), ("", "pods")):
        assert {(group, resource, verb) for verb in ("get", "list", "watch")} <= granted
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False and security["readOnlyRootFilesystem"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    # The picker outlives the gateway pods' stop, drain included.
    gateways = _one("Deployment", K8S)["spec"]["template"]["spec"]
    grace_s = pod["spec"]["terminationGracePeriodSeconds"]
    assert grace_s >= gateways["terminationGracePeriodSeconds"]


def test_the_picker_scrapes_what_the_gateway_serves_it_without_a_token() -> None:
    # The picker's metrics source (llm-d-router v0.10.0) sends no bearer token, so the
    # docs tell a pool to keep the gateway's metrics token empty; its config has no
    # authorization to drift from that.
    (source,) = [p for p in _epp_config()["plugins"] if p["type"] == "metrics-data-source"]
    assert not {"bearerToken", "authorization", "headers"} & set(source["parameters"])
    assert "metrics-token=" in (ROOT / "deploy" / "README.md").read_text()
    assert "sends no Authorization header" in (POOL / "epp-config.yaml").read_text()


def test_http_route_sends_v1_to_the_pool() -> None:
    route, pool = _one("HTTPRoute"), _one("InferencePool")
    (rule,) = route["spec"]["rules"]
    (backend,) = rule["backendRefs"]
    assert (backend["group"], backend["kind"], backend["name"]) == (
        pool["apiVersion"].split("/")[0],
        "InferencePool",
        pool["metadata"]["name"],
    )
    (match,) = rule["matches"]
    assert match["path"] == {"type": "PathPrefix", "value": "/v1"}
    app = fake_app(Settings(_env_file=None), FakeEngine())  # type: ignore[call-arg]
    paths = {route.path for route in app.routes if isinstance(route, Route)}
    assert {"/v1/chat/completions", "/v1/completions", "/v1/models"} <= paths
    assert not {p for p in paths if p.startswith("/admin")} & {match["path"]["value"]}


def _epp_config() -> dict[str, Any]:
    return dict(yaml.safe_load((POOL / "epp-config.yaml").read_text()))


def epp_metric_names() -> set[str]:
    """The metric names the picker reads from each gateway's /metrics."""
    config = _epp_config()
    (extractor,) = [p for p in config["plugins"] if p["type"] == "core-metrics-extractor"]
    engines = {e["name"]: e for e in extractor["parameters"]["engineConfigs"]}
    engine = engines[extractor["parameters"]["defaultEngine"]]
    specs = [v for k, v in engine.items() if k.endswith("Spec") and v]
    return {spec.split("{")[0] for spec in specs}


def test_epp_config_is_complete() -> None:
    config = _epp_config()
    assert (config["apiVersion"], config["kind"]) == ("llm-d.ai/v1alpha1", "EndpointPickerConfig")
    declared = {p.get("name", p["type"]) for p in config["plugins"]}
    (profile,) = config["schedulingProfiles"]
    assert {p["pluginRef"] for p in profile["plugins"]} <= declared
    (source,) = [p for p in config["plugins"] if p["type"] == "metrics-data-source"]
    assert source["parameters"]["path"] == "/metrics"
    names = epp_metric_names()
    assert {"dlfp_queued_requests", "vllm:kv_cache_usage_perc"} <= names


async def test_epp_reads_dlfp_metrics_the_gateway_exports() -> None:
    async with fake_client() as (client, _, _):
        response = await client.get("/metrics")
    assert response.status_code == 200
    dlfp = {n for n in epp_metric_names() if n.startswith("dlfp_")}
    assert dlfp and not dlfp - exported_series(response.text)
    # The vllm:* names are checked on a real engine (below, engine tier).
    assert all(n.startswith(("dlfp_", "vllm:")) for n in epp_metric_names())


@pytest.mark.engine
def test_epp_metrics_exist_on_a_real_gateway(gateway_server: Server) -> None:
    with gateway_server.client() as client:
        response = client.get("/metrics")
    assert response.status_code == 200
    missing = epp_metric_names() - exported_series(response.text)
    assert not missing, f"the endpoint picker reads metrics the gateway does not export: {missing}"


def test_kustomize_builds_the_inference_pool(
    validators: dict[tuple[str, str], jsonschema.protocols.Validator],
) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (the manifests are still checked as YAML above)")
    done = subprocess.run([kubectl, "kustomize", str(POOL)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    kinds = {d["kind"] for d in docs}
    assert len(kinds) == len(docs) and kinds == {
        "ConfigMap",
        "Deployment",
        "HTTPRoute",
        "InferencePool",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    }
    for doc in docs:
        validator = validators.get((doc["apiVersion"], doc["kind"]))
        if validator is not None:
            assert _errors(validator, doc) == []
    # The ConfigMap's generated (hashed) name reaches the Deployment's volume.
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap"]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert config_map["metadata"]["name"] in {v.get("configMap", {}).get("name") for v in volumes}
    assert yaml.safe_load(config_map["data"]["epp-config.yaml"]) == _epp_config()
