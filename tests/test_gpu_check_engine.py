"""``bench gpu-check`` end to end on the CPU (engine tier): its own gateway on the tiny test
model, ``--device cpu``, so the script itself runs; the checks that only hold on a GPU are
reported there, not asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_runs_on_the_cpu(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "gpu-check"
    command = [
        sys.executable,
        "-m",
        "gateway",
        "bench",
        "gpu-check",
        "--device",
        "cpu",
        "--model",
        str(tiny_model_dir),
        "--out",
        str(out),
        "--decoders",
        "2",
        "--decode-tokens",
        "24",
        "--long-words",
        "400",
        "--episodes",
        "1",
        "--long-prefill-s",
        "0.3",
    ]
    env = {**os.environ, "DLFP_STARTUP_FIT_S": "0"}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    record = json.loads((out / "gpu-check.json").read_text())
    checks = {check["name"]: check for check in record["checks"]}
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    assert checks["scheduler"]["passed"] is True, checks["scheduler"]
    assert checks["device_ms"]["passed"] is True, checks["device_ms"]
    assert checks["controller moves"]["passed"] is True, checks["controller moves"]
    # A CPU engine is its own host: reported, never asserted.
    assert checks["episodes"]["passed"] is None
    assert checks["device against the streams"]["passed"] is None
    assert (out / "device-vs-completion.png").stat().st_size > 0
    assert "| check | result | detail |" in result.stdout
