"""The one gateway module that reaches the vLLM engine (``engine_worker.client.engine``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine_worker.client.device import detect_device
from engine_worker.contract.api import Engine
from engine_worker.contract.device_defaults import defaults_for
from engine_worker.contract.dlfp_config import Device, DLFPConfig
from gateway.settings import Settings

EMBEDDED_MODEL_NAME = "smollm2-135m-instruct"


def resolve_device(settings: Settings) -> Device:
    """The setting, or with ``auto`` the device ``nvidia-smi`` finds (CUDA untouched)."""
    if settings.device != "auto":
        return settings.device
    return detect_device()


def build_engine(
    settings: Settings,
    device: Device,
    dlfp: DLFPConfig,
    stat_loggers: list[Callable[..., Any]] | None = None,
) -> Engine:
    """The real engine for these settings; the model is resolved when it starts."""
    from engine_worker.client.engine import EngineSpec, VLLMEngine

    served = settings.served_model_name or (
        Path(settings.model).name if settings.model else EMBEDDED_MODEL_NAME
    )
    spec = EngineSpec(
        model=settings.model or "",
        served_model_name=served,
        device=device,
        max_model_len=settings.max_model_len,
        max_num_batched_tokens=settings.max_num_batched_tokens
        or defaults_for(device).max_num_batched_tokens,
        max_num_seqs=settings.max_num_seqs or defaults_for(device).max_num_seqs,
        dtype=settings.dtype,
        dlfp=dlfp,
        kv_cache_gib=settings.kv_cache_gib,
        engine_args=_engine_args(settings),
        model_cache_dir=settings.model_cache_dir,
        stat_loggers=list(stat_loggers or []),
        tool_call_parser=settings.tool_call_parser,
        reasoning_parser=settings.reasoning_parser,
        chat_template=settings.chat_template,
        grammar_compile_timeout_s=settings.grammar_compile_timeout_s,
        startup_fit_s=settings.startup_fit_s,
    )
    return VLLMEngine(spec)


def _engine_args(settings: Settings) -> dict[str, str]:
    """vLLM's engine arguments as its CLI reads them: the settings that map onto them,
    with ``engine_args``."""
    args = {"generation_config": settings.generation_config} | dict(settings.engine_args)
    if settings.scheduling_policy == "priority":
        args["scheduling_policy"] = "priority"
    if settings.default_max_tokens is not None:
        # vLLM reads a request's default length from the generation config: the setting
        # overrides the model's max_new_tokens there, beside any other override given.
        override = json.loads(args.get("override_generation_config") or "{}")
        override["max_new_tokens"] = settings.default_max_tokens
        args["override_generation_config"] = json.dumps(override)
    return args
