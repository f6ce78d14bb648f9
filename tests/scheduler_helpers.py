"""vLLM's real ``Scheduler``, built directly on CPU, for the scheduler tests.

No engine process and no model run: like vLLM's own scheduler tests, the
scheduler is constructed from a ``VllmConfig`` (a tiny Qwen3 ``config.json``
in a temporary directory) and a ``KVCacheConfig``, fed ``Request`` objects,
and given fake ``ModelRunnerOutput``s (one sampled token per finished prefill
or decode). Test modules wrap ``build_scheduler`` in a fixture.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

from engine_worker.contract.dlfp_config import DLFPConfig

BLOCK_SIZE = 16
SAMPLED_TOKEN = 7
TINY_QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
    "attention_bias": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def write_tiny_model(path: Path) -> Path:
    (path / "config.json").write_text(json.dumps(TINY_QWEN3))
    return path


def build_scheduler(
    model_dir: Path,
    cls: type[Scheduler],
    dlfp: DLFPConfig | None = None,
    max_num_batched_tokens: int = 512,
    long_prefill_token_threshold: int = 0,
    num_blocks: int = 2000,
    policy: str = "fcfs",
) -> Scheduler:
    vllm_config = VllmConfig(
        scheduler_config=SchedulerConfig(
            max_num_seqs=16,
            max_num_batched_tokens=max_num_batched_tokens,
            max_model_len=4096,
            is_encoder_decoder=False,
            enable_chunked_prefill=True,
            long_prefill_token_threshold=long_prefill_token_threshold,
            policy=policy,
        ),
        model_config=ModelConfig(
            model=str(model_dir), skip_tokenizer_init=True, dtype="bfloat16", max_model_len=4096
        ),
        cache_config=CacheConfig(block_size=BLOCK_SIZE, enable_prefix_caching=False),
        additional_config={} if dlfp is None else {"dlfp": dlfp.model_dump(mode="json")},
    )
    vllm_config.cache_config.num_gpu_blocks = num_blocks
    spec = FullAttentionSpec(
        block_size=BLOCK_SIZE, num_kv_heads=1, head_size=32, dtype=torch.float32
    )
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)],
    )
    return cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=BLOCK_SIZE,
    )


def make_request(
    request_id: str, num_prompt_tokens: int, max_tokens: int = 20, priority: int = 0
) -> Request:
    return Request(
        request_id=request_id,
        prompt_token_ids=[11] * num_prompt_tokens,
        sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True),
        pooling_params=None,
        priority=priority,
    )


def run_step(
    scheduler: Scheduler, executed: Callable[[SchedulerOutput], None] | None = None
) -> SchedulerOutput:
    """One synchronous engine step with a fake model runner; ``executed`` sees the
    scheduler's output where a worker would, before ``update_from_output``."""
    output = scheduler.schedule()
    if executed is not None:
        executed(output)
    req_ids = list(output.num_scheduled_tokens)
    sampled = [[] if scheduler.requests[r].is_prefill_chunk else [SAMPLED_TOKEN] for r in req_ids]
    runner_output = ModelRunnerOutput(
        req_ids=req_ids,
        req_id_to_index={r: i for i, r in enumerate(req_ids)},
        sampled_token_ids=sampled,
    )
    scheduler.update_from_output(output, runner_output)
    return output
