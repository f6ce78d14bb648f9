"""Imports flow one way: controllers are pure, and the HTTP layer reaches vLLM
only through gateway/engine.py."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def _offenders(files: list[Path], forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    found = {}
    for path in files:
        bad = sorted(n for n in _imports(path) if n.split(".")[0] in forbidden or n in forbidden)
        if bad:
            found[str(path.relative_to(ROOT))] = bad
    return found


def test_controller_imports_neither_vllm_nor_fastapi() -> None:
    pure = [
        ROOT / "engine_worker" / name
        for name in (
            "controller.py",
            "dlfp_config.py",
            "api.py",
            "cost_model.py",
            "prefill_order.py",
            "cpu_features.py",
            "controller_params.py",
            "tokenizer_guard.py",
            "device.py",
            "additional_config.py",
        )
    ]
    pure += [p for p in (ROOT / "engine_worker" / "step_timing.py",) if p.exists()]
    assert _offenders(pure, ("vllm", "fastapi", "starlette", "torch")) == {}


def test_gateway_reaches_vllm_only_through_its_engine_module() -> None:
    files = [
        p
        for p in (ROOT / "gateway").rglob("*.py")
        if p.name != "engine.py" or p.parent.name != "gateway"
    ]
    forbidden = (
        "vllm",
        "torch",
        "engine_worker.engine",
        "engine_worker.scheduler",
        "engine_worker.channel",
    )
    assert _offenders(files, forbidden) == {}
