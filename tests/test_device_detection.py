"""The device is found with ``nvidia-smi -L``, never through torch, and a CUDA engine
starts its processes with ``spawn`` (quick tier).

Each detection runs in a fresh interpreter with a fake ``nvidia-smi`` first on
``PATH``, so that whether torch was imported, or CUDA started, is down to the
detection alone.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine_worker.client.engine_args import MULTIPROC_METHOD_ENV, _spawn_engine_processes

ROOT = Path(__file__).resolve().parent.parent
H100 = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-6b3c1f2e-9a4d-4e0b-8f51-2d7c0a9e4b13)"
PROBE = """
import json, sys
import engine_worker.client.device as device
from gateway.engine import resolve_device
from gateway.settings import Settings

device.NVIDIA_SMI_TIMEOUT_S = float(sys.argv[1])
detected = device.detect_device()
resolved = resolve_device(Settings(_env_file=None, device="auto"))
torch = sys.modules.get("torch")
print(json.dumps({
    "detected": detected,
    "resolved": resolved,
    "torch_imported": torch is not None,
    "cuda_initialized": torch is not None and torch.cuda.is_initialized(),
}))
"""


def fake_nvidia_smi(directory: Path, body: str) -> Path:
    directory.mkdir()
    script = directory / "nvidia-smi"
    script.write_text(f'#!/bin/sh\n[ "$1" = "-L" ] || exit 9\n{body}\n')
    script.chmod(0o755)
    return directory


def probe(tmp_path: Path, path: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """``detect_device`` and ``resolve_device`` (setting ``auto``) in a fresh interpreter."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLFP_")}
    env |= {"PATH": path, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(timeout_s)],
        env=env,
        cwd=tmp_path,  # no .env
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def on_path_first(directory: Path) -> str:
    return os.pathsep.join([str(directory), os.environ.get("PATH", os.defpath)])


def test_a_listed_gpu_is_cuda_and_cuda_stays_untouched(tmp_path: Path) -> None:
    fake = fake_nvidia_smi(tmp_path / "bin", f"echo '{H100}'")
    answer = probe(tmp_path, on_path_first(fake))
    assert answer["detected"] == "cuda" and answer["resolved"] == "cuda"
    assert not answer["torch_imported"] or not answer["cuda_initialized"], answer


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("echo 'No devices were found'", id="no-gpu-listed"),
        pytest.param(f"echo '{H100}'\nexit 1", id="non-zero-exit"),
        pytest.param(
            "echo 'Failed to initialize NVML: Driver/library version mismatch'\nexit 9",
            id="driver-error",
        ),
    ],
)
def test_no_gpu_listed_or_a_failing_nvidia_smi_is_cpu(tmp_path: Path, body: str) -> None:
    fake = fake_nvidia_smi(tmp_path / "bin", body)
    answer = probe(tmp_path, on_path_first(fake))
    assert answer["detected"] == "cpu" and answer["resolved"] == "cpu"


def test_a_hung_nvidia_smi_is_cpu_after_the_timeout(tmp_path: Path) -> None:
    fake = fake_nvidia_smi(tmp_path / "bin", f"echo '{H100}'\nexec sleep 30")
    answer = probe(tmp_path, on_path_first(fake), timeout_s=0.5)
    assert answer["detected"] == "cpu"


def test_no_nvidia_smi_on_path_is_cpu(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    answer = probe(tmp_path, str(empty))
    assert answer["detected"] == "cpu" and answer["resolved"] == "cpu"


def test_cuda_engine_processes_spawn(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(MULTIPROC_METHOD_ENV, raising=False)
    with caplog.at_level(logging.INFO, logger="dlfp.engine"):
        _spawn_engine_processes()
    assert os.environ[MULTIPROC_METHOD_ENV] == "spawn"
    assert [getattr(r, "event", None) for r in caplog.records] == ["multiproc_spawn"]


def test_an_operators_multiproc_method_stands(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(MULTIPROC_METHOD_ENV, "fork")
    with caplog.at_level(logging.INFO, logger="dlfp.engine"):
        _spawn_engine_processes()
    assert os.environ[MULTIPROC_METHOD_ENV] == "fork"
    assert not caplog.records
