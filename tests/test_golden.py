"""The names users, scripts and dashboards rely on stay as they are (quick tier): the
OpenAPI schema, the settings and their variables, and the metric families, each against
a golden file in ``tests/golden/``. A deliberate change regenerates them:
``python -m tests.test_golden``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from gateway.metrics import build_metrics
from gateway.settings import Settings
from gateway.tenant_metrics import build_tenant_metrics
from tests.fakes import FakeEngine
from tests.http_helpers import fake_app

GOLDEN = Path(__file__).resolve().parent / "golden"


def openapi() -> dict[str, Any]:
    schema: dict[str, Any] = fake_app(Settings(_env_file=None), FakeEngine()).openapi()  # type: ignore[call-arg]
    return schema


def setting_names() -> list[str]:
    return sorted(f"DLFP_{name.upper()}" for name in Settings.model_fields)


def metric_names() -> list[str]:
    registry = build_metrics().registry
    build_tenant_metrics(registry)
    return sorted({family.name for family in registry.collect()})


CURRENT = {
    "openapi.json": lambda: json.dumps(openapi(), indent=1, sort_keys=True) + "\n",
    "settings.txt": lambda: "\n".join(setting_names()) + "\n",
    "metrics.txt": lambda: "\n".join(metric_names()) + "\n",
}


def test_the_openapi_schema_is_the_golden_one() -> None:
    assert CURRENT["openapi.json"]() == (GOLDEN / "openapi.json").read_text()


def test_the_setting_names_are_the_golden_ones() -> None:
    assert CURRENT["settings.txt"]() == (GOLDEN / "settings.txt").read_text()


def test_the_metric_names_are_the_golden_ones() -> None:
    assert CURRENT["metrics.txt"]() == (GOLDEN / "metrics.txt").read_text()


if __name__ == "__main__":
    GOLDEN.mkdir(exist_ok=True)
    for name, render in CURRENT.items():
        (GOLDEN / name).write_text(render())
        print(f"wrote {GOLDEN / name}", file=sys.stderr)
