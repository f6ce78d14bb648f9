"""DLFP's start-up settings reach the engine core without entering vLLM's compile hash
(quick tier).

The ``VllmConfig`` is the engine's own (``_engine_config``), built in-process for a
tiny Qwen3 ``config.json`` in a temporary directory: no weights, no tokenizer, no
engine process.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from vllm.config import VllmConfig

from engine_worker.client.engine_args import EngineSpec, _engine_config
from engine_worker.contract.additional_config import (
    DLFP_KEY,
    DLFPAdditionalConfig,
    read_dlfp_config,
)
from engine_worker.contract.dlfp_config import ControllerMode, DLFPConfig

TUNED = DLFPConfig(controller=ControllerMode.FIXED, itl_slo_ms=120.0)


def engine_config(model_dir: Path, dlfp: DLFPConfig, **overrides: Any) -> Any:
    spec = EngineSpec(
        model=str(model_dir),
        served_model_name="tiny-qwen3",
        device="cpu",
        max_model_len=1024,
        max_num_batched_tokens=512,
        max_num_seqs=overrides.pop("max_num_seqs", 4),
        dtype="bfloat16",
        dlfp=dlfp,
        engine_args={"skip_tokenizer_init": "true", **overrides},
    )
    return _engine_config(spec)


def test_dlfp_settings_leave_the_compile_hash_alone(model_dir: Path) -> None:
    default = engine_config(model_dir, DLFPConfig())
    tuned = engine_config(model_dir, TUNED)
    assert isinstance(tuned.additional_config, DLFPAdditionalConfig)
    assert tuned.compute_hash() == default.compute_hash()
    assert engine_config(model_dir, TUNED, max_num_seqs=8).compute_hash() != tuned.compute_hash()


def test_dlfp_settings_reach_the_engine_core(model_dir: Path) -> None:
    config = engine_config(model_dir, TUNED)
    assert read_dlfp_config(config.additional_config) == TUNED
    # The engine core receives the VllmConfig pickled (spawn) or forked.
    carried = pickle.loads(pickle.dumps(config.additional_config))
    assert read_dlfp_config(carried) == TUNED
    assert carried.compute_hash() == config.additional_config.compute_hash()
    copied = pickle.loads(pickle.dumps(config))
    assert read_dlfp_config(copied.additional_config) == TUNED
    assert copied.compute_hash() == config.compute_hash()


def test_vllm_validation_keeps_the_carrier() -> None:
    carrier = DLFPAdditionalConfig({DLFP_KEY: TUNED.model_dump(mode="json")})
    assert VllmConfig(additional_config=carrier).additional_config is carrier


def test_an_operators_additional_config_stays_a_dict(model_dir: Path) -> None:
    """vLLM reads its own entries from a plain dict only; DLFP's are hashed there too."""
    extra = {"additional_config": '{"gdn_prefill_backend": "triton"}'}
    config = engine_config(model_dir, TUNED, **extra)
    assert type(config.additional_config) is dict
    assert config.additional_config["gdn_prefill_backend"] == "triton"
    assert read_dlfp_config(config.additional_config) == TUNED
    assert engine_config(model_dir, DLFPConfig(), **extra).compute_hash() != config.compute_hash()
