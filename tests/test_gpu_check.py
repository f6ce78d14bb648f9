"""``make gpu-check`` and ``bench gpu-check`` without a GPU (quick tier): the refusal before
any install, and the random-weight model the check makes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.harness.gpu_check import (
    SHAPES,
    Report,
    make_model_dir,
    merged_engine_args,
    num_parameters,
)

ROOT = Path(__file__).resolve().parents[1]


def _fake_nvidia_smi(folder: Path, listing: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\nprintf '%s' '{listing}'\n", encoding="utf-8")
    script.chmod(0o755)
    return folder


def test_make_gpu_check_refuses_without_a_gpu_before_installing(tmp_path: Path) -> None:
    bin_dir = _fake_nvidia_smi(tmp_path / "bin", "")
    venv = tmp_path / "venv"
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    result = subprocess.run(
        ["make", "-C", str(ROOT), "--no-print-directory", "gpu-check", f"VENV={venv}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert result.returncode != 0
    assert len(lines) == 1 and "nvidia-smi -L lists none" in lines[0], lines
    assert not venv.exists()  # the install step never ran


def test_the_8b_shape_is_llama_8b_with_the_embedded_tokenizer(tmp_path: Path) -> None:
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    vocab = {f"t{i}": i for i in range(100)}
    (tokenizer / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}}))
    added = {"100": {"content": "<|im_start|>"}, "101": {"content": "<|im_end|>"}}
    (tokenizer / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": added}))
    model = make_model_dir("8b", tokenizer, tmp_path / "model")
    config = json.loads((model / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["hidden_size"], config["num_hidden_layers"]) == (4096, 32)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (32, 8)
    assert (config["intermediate_size"], config["max_position_embeddings"]) == (14336, 8192)
    assert config["vocab_size"] == 128256  # Llama-3's, not the tokenizer's
    assert num_parameters(config) == pytest.approx(8.03e9, rel=0.01)
    assert (model / "tokenizer.json").exists() and not list(model.glob("*.safetensors"))
    assert SHAPES["1b"]["hidden_size"] < SHAPES["8b"]["hidden_size"]


def test_the_special_tokens_count_once_in_a_shape_without_a_vocabulary(tmp_path: Path) -> None:
    # SmolLM2's special tokens are in the vocabulary and in added_tokens_decoder.
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    vocab = {f"t{i}": i for i in range(100)}
    (tokenizer / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}}))
    added = {"0": {"content": "<|endoftext|>"}, "1": {"content": "<|im_start|>"}}
    (tokenizer / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": added}))
    config = json.loads(
        (make_model_dir("1b", tokenizer, tmp_path / "m") / "config.json").read_text()
    )
    assert config["vocab_size"] == 100


def test_the_check_keeps_the_operators_engine_args_and_sets_its_own() -> None:
    operator = json.dumps({"load_format": "safetensors", "tensor_parallel_size": 2})
    merged = json.loads(merged_engine_args(operator))
    assert merged == {"load_format": "dummy", "tensor_parallel_size": 2}
    assert json.loads(merged_engine_args(None)) == {"load_format": "dummy"}
    assert json.loads(merged_engine_args("  ")) == {"load_format": "dummy"}
    with pytest.raises(ValueError, match="JSON object"):
        merged_engine_args("[1, 2]")


def test_gpu_check_runs_without_matplotlib() -> None:
    # None in sys.modules: what the GPU image (the gpu extra only) finds.
    code = (
        "import sys\nsys.modules['matplotlib'] = None\n"
        "from gateway.cli import main\n"
        "try:\n    main(['bench', 'gpu-check', '--help'])\n"
        "except SystemExit as exc:\n    assert exc.code == 0, exc.code\n"
        "from bench.harness import gpu_check\n"
        "assert not gpu_check.can_plot()\n"
        "assert 'matplotlib' not in {k for k, v in sys.modules.items() if v is not None}\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "gpu-check" in result.stdout and "needs the bench extra" not in result.stderr


def test_the_episodes_it_runs_need_no_extra_without_plots() -> None:
    from bench.cli import needs_no_extra

    assert needs_no_extra(["gpu-check", "--device", "cuda"])
    assert needs_no_extra(["episodes", "--base-url", "x", "--no-plots"])
    assert not needs_no_extra(["episodes", "--base-url", "x"])
    assert not needs_no_extra(["summary", "--no-plots"])


def test_a_reported_check_does_not_fail_the_run_and_a_failed_one_does() -> None:
    report = Report(device="cpu", model="tiny")
    report.add("episodes", None, "reported on the CPU")
    report.add("device_ms", True, "every step")
    assert report.ok and "| episodes | reported |" in report.table()
    report.add("scheduler", False, "wrong class")
    assert not report.ok and "**fail**" in report.table()


def test_the_device_timer_cost_bench_times_every_step() -> None:
    from bench.harness.device_timer_cost import measure

    result = measure(num_blocks=4, block_steps=50)
    assert result["num_written"] == 4 * 50  # the timed arm's every step reached the ring
    assert result["added_us"] == result["added_us"]  # a number, not NaN
