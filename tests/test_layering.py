"""Imports flow one way, and the engine side's folders say which process a module runs in.

``controller/`` is the standard library only; ``contract/`` imports no vLLM; the HTTP
layer reaches vLLM only through ``gateway/engine.py`` and ``engine_worker/client``; and
nothing of ``engine_core/`` or ``worker/`` is ever imported into the gateway process. The
gateway never imports the benchmark either, and the benchmark's modules import each other
without a circle.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENGINE_WORKER = ROOT / "engine_worker"
SUBPACKAGES = ("client", "contract", "controller", "engine_core", "worker")


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
        bad = sorted(
            n for n in _imports(path) if any(n == f or n.startswith(f + ".") for f in forbidden)
        )
        if bad:
            found[str(path.relative_to(ROOT))] = bad
    return found


def _package(name: str) -> list[Path]:
    return sorted((ENGINE_WORKER / name).rglob("*.py"))


def test_every_engine_worker_module_lives_in_the_folder_of_its_process() -> None:
    loose = {p.name for p in ENGINE_WORKER.glob("*.py")}
    assert loose == {"__init__.py", "worker_extension.py"}  # the second: an older path
    for name in SUBPACKAGES:
        assert ast.get_docstring(ast.parse((ENGINE_WORKER / name / "__init__.py").read_text()))


def test_the_controller_imports_the_standard_library_only() -> None:
    files = _package("controller")
    assert {"cap_controller.py", "cost_model.py", "margin.py", "params.py"} <= {
        p.name for p in files
    }
    outside = {
        str(p.relative_to(ROOT)): sorted(
            n
            for n in _imports(p)
            if n.split(".")[0] not in sys.stdlib_module_names
            and not n.startswith("engine_worker.controller")
        )
        for p in files
    }
    assert {path: names for path, names in outside.items() if names} == {}


def test_the_contract_imports_no_vllm_and_no_process_of_its_own() -> None:
    forbidden = (
        "vllm",
        "torch",
        "fastapi",
        "starlette",
        "engine_worker.client",
        "engine_worker.engine_core",
        "engine_worker.worker",
    )
    assert _offenders(_package("contract"), forbidden) == {}


def test_the_client_never_imports_the_engine_core_or_the_workers() -> None:
    forbidden = ("engine_worker.engine_core", "engine_worker.worker", "engine_worker.controller")
    assert _offenders(_package("client"), forbidden) == {}


def test_the_worker_imports_neither_the_gateway_nor_the_engine_core() -> None:
    forbidden = ("engine_worker.client", "engine_worker.engine_core", "gateway", "fastapi")
    assert _offenders(_package("worker"), forbidden) == {}


def test_gateway_reaches_vllm_only_through_its_engine_module() -> None:
    """Only ``gateway/engine.py`` builds the engine client (lazily); other gateway modules
    may use the client's plain helpers (the tokenizer lock), never vLLM itself."""
    forbidden = ("vllm", "torch", "engine_worker.engine_core", "engine_worker.worker")
    gateway = sorted((ROOT / "gateway").rglob("*.py"))
    assert _offenders(gateway, forbidden) == {}
    others = [p for p in gateway if p != ROOT / "gateway" / "engine.py"]
    assert _offenders(others, ("engine_worker.client.engine",)) == {}


def _loaded_in_fresh_interpreter(code: str) -> list[str]:
    script = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_the_gateway_process_loads_nothing_of_the_engine_core_or_the_workers() -> None:
    loaded = _loaded_in_fresh_interpreter(
        "import gateway.app, gateway.engine, engine_worker.client.engine"
    )
    assert "engine_worker.client.engine" in loaded
    assert [
        m for m in loaded if m.startswith(("engine_worker.engine_core", "engine_worker.worker"))
    ] == []


def test_the_controller_loads_no_pydantic_and_no_vllm() -> None:
    loaded = _loaded_in_fresh_interpreter(
        "import engine_worker.controller, engine_worker.controller.cap_controller"
    )
    assert [m for m in loaded if m.split(".")[0] in ("pydantic", "vllm", "torch")] == []


def test_the_names_the_gateway_gives_vllm_name_the_classes() -> None:
    """The worker extension's path and method names, as the client spells them
    (``contract.engine_hooks``), resolve in a worker (no vLLM needed to import it)."""
    from engine_worker.contract import engine_hooks
    from engine_worker.worker.worker_extension import DLFPWorkerExtension

    for path in engine_hooks.WORKER_EXTENSION_ALIASES:
        module, _, name = path.rpartition(".")
        assert getattr(__import__(module, fromlist=[name]), name) is DLFPWorkerExtension
    for method in ("ALLOCATE_METHOD", "INSTALL_TIMER_METHOD", "GUARD_SEEDED_METHOD"):
        assert callable(getattr(DLFPWorkerExtension, getattr(engine_hooks, method)))


def test_the_gateway_imports_no_bench_module() -> None:
    """``dlfp-gateway bench`` reaches the harness through an entry point (``bench.cli``),
    never through an import in ``gateway/``."""
    assert _offenders(sorted((ROOT / "gateway").rglob("*.py")), ("bench",)) == {}
    loaded = _loaded_in_fresh_interpreter("import gateway.app, gateway.cli")
    assert [m for m in loaded if m == "bench" or m.startswith("bench.")] == []


def _bench_module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _bench_graph() -> dict[str, set[str]]:
    """Each ``bench`` module and the ``bench`` modules it imports, lazily or not."""
    files = {_bench_module(p): p for p in (ROOT / "bench").rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets.add(node.module)
                targets.update(f"{node.module}.{a.name}" for a in node.names)
        graph[name] = {t for t in targets if t in files and t != name}
    return graph


def _circle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of ``graph`` (its modules in order), or ``[]``."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str]:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return []
        path.append(node)
        for target in sorted(graph[node]):
            found = visit(target)
            if found:
                return found
        path.pop()
        done.add(node)
        return []

    for node in sorted(graph):
        found = visit(node)
        if found:
            return found
    return []


def test_the_circle_finder_finds_a_circle() -> None:
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b"}, "b": set()}) == []


def test_bench_modules_import_each_other_without_a_circle() -> None:
    graph = _bench_graph()
    assert {"bench.cli", "bench.commands", "bench.abuse.scenarios", "bench.lib.loadgen"} <= set(
        graph
    )
    assert _circle(graph) == []


def test_the_shared_bench_modules_import_no_benchmark() -> None:
    """``bench/lib/`` is what the benchmarks share: it imports only itself."""
    graph = _bench_graph()
    outside = {
        name: sorted(t for t in targets if not t.startswith("bench.lib"))
        for name, targets in graph.items()
        if name.startswith("bench.lib")
    }
    assert {name: targets for name, targets in outside.items() if targets} == {}
