"""Imports flow one way: every engine_worker module but a short vLLM-facing list is pure,
the HTTP layer reaches vLLM only through gateway/engine.py, and bench only lazily."""

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


VLLM_FACING = frozenset(
    {
        "engine.py",
        "scheduler.py",
        "channel.py",
        "worker_extension.py",
        "cpu_pipeline.py",
        "device_timer.py",
        "output_parser.py",
        "embedded_model.py",
        "startup_fit.py",
    }
)
"""The engine_worker modules that may import vLLM or torch; every other one is pure."""


def test_every_other_engine_worker_module_imports_neither_vllm_nor_fastapi() -> None:
    modules = sorted((ROOT / "engine_worker").glob("*.py"))
    names = {p.name for p in modules}
    assert names >= VLLM_FACING, VLLM_FACING - names  # the allowlist names real modules
    pure = [p for p in modules if p.name not in VLLM_FACING]
    assert {"controller.py", "cost_model.py", "margin.py", "dlfp_config.py"} <= {
        p.name for p in pure
    }
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


def test_gateway_imports_bench_only_lazily_in_the_bench_command() -> None:
    """``gateway/cli.py`` may import ``bench`` inside the function that runs ``bench``;
    no gateway module imports it at module level."""
    lazy: list[str] = []
    for path in (ROOT / "gateway").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "bench":
                module_level = node in tree.body
                assert not module_level, f"{path.relative_to(ROOT)} imports bench at module level"
                lazy.append(str(path.relative_to(ROOT)))
            elif isinstance(node, ast.Import):
                assert all(a.name.split(".")[0] != "bench" for a in node.names), path
    assert lazy == ["gateway/cli.py"]
