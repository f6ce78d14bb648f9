"""The engine's arguments and process environment, from the gateway's settings.

``EngineSpec`` is what the gateway resolves; ``_engine_config`` turns it into vLLM's
``VllmConfig`` through vLLM's own argument parser, with DLFP's settings in its
``additional_config``. The rest sets what vLLM's other processes start with: how they
are started, which cores CPU workers bind to, and the gateway's worker extension.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine_worker.contract.additional_config import DLFP_KEY, exempt_dlfp_from_hash
from engine_worker.contract.dlfp_config import Device, DLFPConfig
from engine_worker.contract.engine_hooks import WORKER_EXTENSION_ALIASES, WORKER_EXTENSION_CLS

logger = logging.getLogger("dlfp.engine")

MULTIPROC_METHOD_ENV = "VLLM_WORKER_MULTIPROC_METHOD"
"""How vLLM starts its engine core and workers: ``fork`` (its default) or ``spawn``."""


@dataclass
class EngineSpec:
    """Everything needed to build the engine, resolved from the gateway settings."""

    model: str
    """Local model directory; empty = the embedded model (converted on first use)."""
    served_model_name: str
    device: Device
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    dtype: str
    dlfp: DLFPConfig
    kv_cache_gib: float = 2.0
    engine_args: dict[str, str] = field(default_factory=dict)
    model_cache_dir: Path | None = None
    use_dlfp_scheduler: bool = True
    stat_loggers: list[Callable[..., Any]] = field(default_factory=list)
    tool_call_parser: str | None = "hermes"
    """vLLM's tool-call parser name, for ``tool_choice`` auto."""
    reasoning_parser: str | None = None
    """vLLM's reasoning parser name; None = thinking text stays in the content."""
    chat_template: Path | None = None
    """A Jinja file replacing the model's own chat template."""
    grammar_compile_timeout_s: float = 10.0
    """Longest a JSON schema or structural tag may take to compile (``check_grammar``)."""
    startup_fit_s: float = 0.0
    """Time budget of the cost model's fit at start (``startup_fit``); 0 = none."""


def _engine_args(spec: EngineSpec) -> Any:
    """``AsyncEngineArgs`` from the spec; pass-through args are parsed by vLLM's own CLI."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = [
        "--model",
        spec.model,
        "--served-model-name",
        spec.served_model_name,
        "--max-model-len",
        str(spec.max_model_len),
        "--max-num-batched-tokens",
        str(spec.max_num_batched_tokens),
        "--max-num-seqs",
        str(spec.max_num_seqs),
        "--dtype",
        spec.dtype,
    ]
    if spec.device == "cpu":
        argv.append("--enforce-eager")
    if "structured_outputs_config" not in spec.engine_args:
        # Compact JSON: a grammar that allows any whitespace lets a weak model pad
        # forever (vLLM ignores the per-request flag; this is the engine's).
        compact = '{"backend": "xgrammar", "disable_any_whitespace": true}'
        argv += ["--structured-outputs-config", compact]
    for name, value in spec.engine_args.items():
        flag = "--" + name.replace("_", "-")
        if value.lower() in ("true", "false"):
            argv.append(flag if value.lower() == "true" else "--no-" + flag[2:])
        else:
            argv += [flag, value]
    parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())
    try:
        args = AsyncEngineArgs.from_cli_args(parser.parse_args(argv))
    except SystemExit as exc:  # argparse exits on a bad option: make it an error
        raise ValueError(f"invalid engine arguments: {spec.engine_args}") from exc
    extra = dict(args.additional_config or {})
    extra[DLFP_KEY] = spec.dlfp.model_dump(mode="json")
    args.additional_config = extra
    args.disable_log_stats = False
    return args


def _engine_config(spec: EngineSpec, usage_context: Any = None) -> Any:
    """The ``VllmConfig``, with DLFP's settings out of its compile hash where vLLM allows
    (``engine_worker.contract.additional_config``)."""
    vllm_config = _engine_args(spec).create_engine_config(usage_context=usage_context)
    carried = exempt_dlfp_from_hash(vllm_config.additional_config)
    if isinstance(carried, dict):
        logger.info(
            "DLFP settings stay in vLLM's compile hash: additional_config has other entries",
            extra={"event": "dlfp_config_hashed", "additional_config_keys": sorted(carried)},
        )
    vllm_config.additional_config = carried
    return vllm_config


def _spawn_engine_processes() -> None:
    """Start vLLM's engine core and workers with ``spawn``; an operator's choice stands.

    NOTE: vLLM forks them unless CUDA is initialised in this process, and a child
    forked from a process that has touched CUDA cannot use it ("Cannot re-initialize
    CUDA in forked subprocess"). Spawning also keeps the child clear of this
    process's threads (the engine is built in one, beside the event loop's).
    """
    if MULTIPROC_METHOD_ENV in os.environ:
        return
    os.environ[MULTIPROC_METHOD_ENV] = "spawn"
    logger.info(
        "engine processes start with spawn",
        extra={"event": "multiproc_spawn", "multiproc_method": "spawn"},
    )


def _is_true(value: object) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


def _bind_cpu_workers(world_size: int) -> None:
    """One core per CPU worker when there are several and the binding is not set.

    vLLM's automatic binding asserts one NUMA node per worker (``utils/
    ompmultiprocessing.py``); a one-node machine running pipeline stages needs
    ``VLLM_CPU_OMP_THREADS_BIND`` set before the workers start.
    """
    if world_size <= 1 or os.environ.get("VLLM_CPU_OMP_THREADS_BIND"):
        return
    cores = sorted(os.sched_getaffinity(0))
    mask = "|".join(str(cores[rank % len(cores)]) for rank in range(world_size))
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = mask
    logger.info(
        "binding CPU workers",
        extra={"event": "cpu_bind", "world_size": world_size, "omp_threads_bind": mask},
    )


def _honour_async_scheduling(vllm_config: Any, engine_args: dict[str, str]) -> None:
    """Where async scheduling is asked for on CPU, say why it stays off.

    NOTE: vLLM's CPU platform sets ``async_scheduling = False`` silently in
    ``check_and_update_config``. Setting it back on the resolved config here
    does not last: the engine-core process runs ``VllmConfig.__post_init__``
    again after its handshake (``v1/engine/core.py``), the platform turns it
    off again, and the engine core steps synchronously (batch queue of 1). The
    frontend's copy must agree with the engine core's (it picks the scheduler
    class), so it is left off and the request is logged as not honoured.
    """
    if not _is_true(engine_args.get("async_scheduling", "false")):
        return
    logger.warning(
        "async scheduling asked for, but vLLM CPU 0.32 turns it off again in the engine "
        "core; use pipeline_parallel_size=2 for a batch queue on CPU",
        extra={"event": "async_scheduling_unavailable"},
    )


def _add_worker_extension(vllm_config: Any) -> bool:
    """Whether the gateway's worker extension is installed (and install it).

    It always serves the device timer (``observation`` may switch to ``device`` at
    runtime), and with CPU pipeline stages the stage buffer too. An operator's own
    extension stands: then neither runs.
    """
    parallel = vllm_config.parallel_config
    if parallel.worker_extension_cls not in ("", *WORKER_EXTENSION_ALIASES):
        logger.warning(
            "a worker extension of your own: no device step timing, and no stage buffers on CPU",
            extra={
                "event": "device_timer_unavailable",
                "reason": "worker_extension_cls",
                "worker_extension_cls": str(parallel.worker_extension_cls),
            },
        )
        return False
    parallel.worker_extension_cls = WORKER_EXTENSION_CLS
    return True
