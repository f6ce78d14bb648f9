"""The benchmark harness is an extra (quick tier): its dependencies are not the gateway's,
the images leave it out, the gateway finds it through an entry point and loads it only for
``dlfp-gateway bench``, and without the extra that command says in one line how to
install it."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
BENCH_ONLY = {"matplotlib"}
INSTALL = "pip install 'dlfp-gateway[bench]'"


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower()


def test_the_bench_extra_holds_what_only_the_harness_needs() -> None:
    core = {_name(r) for r in PROJECT["dependencies"]}
    assert not core & BENCH_ONLY
    assert "matplotlib==3.11.2" in PROJECT["optional-dependencies"]["bench"]
    makefile = (ROOT / "Makefile").read_text()
    assert '-e ".[$(DEVICE),dev,bench]"' in makefile, "make install covers the harness's tests"


def test_the_images_install_no_bench_extra() -> None:
    for name in ("Dockerfile.cpu", "Dockerfile.gpu"):
        text = (ROOT / "deploy" / name).read_text()
        installs = re.findall(r"pip install[^\n&]*", text)
        assert installs, name
        for line in installs:
            extras = re.findall(r"\[([^\]]*)\]", line)
            assert all("bench" not in e.split(",") for e in extras), f"{name}: {line}"
            assert not any(dep in line for dep in BENCH_ONLY), f"{name}: {line}"


def test_the_bench_commands_run_in_the_images_need_no_bench_extra() -> None:
    # deploy/README.md runs `bench gpu-check` in the GPU image, which installs its extras only.
    from bench.cli import WITHOUT_EXTRA

    declared = set(PROJECT["optional-dependencies"])
    text = (ROOT / "deploy" / "Dockerfile.gpu").read_text()
    installed = {
        e
        for line in re.findall(r'pip install[^\n&]*"/src\[([^\]]*)\]"', text)
        for e in line.split(",")
    }
    assert installed and installed <= declared, installed
    assert "bench" not in installed
    run_in_image = set(
        re.findall(r"gateway-gpu bench ([a-z-]+)", (ROOT / "deploy" / "README.md").read_text())
    )
    assert run_in_image and run_in_image <= set(WITHOUT_EXTRA), run_in_image


def test_the_gateway_finds_bench_through_its_entry_point() -> None:
    declared = PROJECT["entry-points"]["dlfp_gateway.commands"]
    assert declared == {"bench": "bench.cli:register"}
    installed = {ep.name: ep.value for ep in entry_points(group="dlfp_gateway.commands")}
    assert installed == declared, "reinstall the project: pip install --no-deps -e ."


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_the_top_level_help_loads_only_the_bench_entry_point() -> None:
    code = (
        "import sys\nfrom gateway.cli import build_parser\n"
        "assert 'bench' in build_parser().format_help()\n"
        "print(sorted(m for m in sys.modules if m == 'bench' or m.startswith('bench.')))\n"
    )
    result = _run(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['bench', 'bench.cli']"


def test_bench_without_the_extra_says_how_to_install_it() -> None:
    # None in sys.modules: what an interpreter without matplotlib finds.
    code = (
        "import sys\nsys.modules['matplotlib'] = None\n"
        "from gateway.cli import main\nsys.exit(main(['bench', 'summary', '--results', 'x']))\n"
    )
    result = _run(code)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and INSTALL in lines[0] and "matplotlib" in lines[0], result.stderr
