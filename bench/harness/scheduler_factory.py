"""vLLM's real ``Scheduler`` (or a DLFP one), built in-process on CPU with no engine.

No engine process, no model run and no weights: like vLLM's own scheduler tests, the
scheduler is constructed from a ``VllmConfig`` (a tiny Qwen3 ``config.json`` in a
folder) and a ``KVCacheConfig``, fed ``Request`` objects, and given a fake
``ModelRunnerOutput`` each step (one sampled token per finished prefill or decode).
``bench overhead`` times such schedulers; the scheduler tests drive them.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

from engine_worker.contract.dlfp_config import DLFPConfig

BLOCK_SIZE = 16
SAMPLED_TOKEN = 7
PROMPT_TOKEN = 11
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
"""Only its shape matters: the scheduler reads the config; no weights exist."""


def write_tiny_model(path: Path, max_position_embeddings: int = 4096) -> Path:
    """``path`` with the tiny Qwen3 ``config.json`` in it."""
    config = {**TINY_QWEN3, "max_position_embeddings": max_position_embeddings}
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return path


def build_scheduler(
    model_dir: Path,
    cls: type[Scheduler],
    dlfp: DLFPConfig | None = None,
    max_num_batched_tokens: int = 512,
    long_prefill_token_threshold: int = 0,
    num_blocks: int = 2000,
    policy: str = "fcfs",
    *,
    max_num_seqs: int = 16,
    max_model_len: int = 4096,
) -> Scheduler:
    """``cls`` (vLLM's ``Scheduler`` or a subclass) over ``num_blocks`` KV blocks; a DLFP
    scheduler reads ``dlfp`` from the ``additional_config``."""
    vllm_config = VllmConfig(
        scheduler_config=SchedulerConfig(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            max_model_len=max_model_len,
            is_encoder_decoder=False,
            enable_chunked_prefill=True,
            long_prefill_token_threshold=long_prefill_token_threshold,
            policy=policy,
        ),
        model_config=ModelConfig(
            model=str(model_dir),
            skip_tokenizer_init=True,
            dtype="bfloat16",
            max_model_len=max_model_len,
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
    """A request of ``num_prompt_tokens`` that generates exactly ``max_tokens``."""
    return Request(
        request_id=request_id,
        prompt_token_ids=[PROMPT_TOKEN] * num_prompt_tokens,
        sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True),
        pooling_params=None,
        priority=priority,
    )


def runner_output(scheduler: Scheduler, output: SchedulerOutput) -> ModelRunnerOutput:
    """A FAKE model runner's answer to ``output``: one sampled token for every decode and
    every prefill that finished; none for a prefill chunk that did not."""
    req_ids = list(output.num_scheduled_tokens)
    requests = scheduler.requests
    sampled = [[] if requests[r].is_prefill_chunk else [SAMPLED_TOKEN] for r in req_ids]
    return ModelRunnerOutput(
        req_ids=req_ids,
        req_id_to_index={r: i for i, r in enumerate(req_ids)},
        sampled_token_ids=sampled,
    )
