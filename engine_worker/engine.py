"""The real engine: vLLM's ``AsyncLLM`` running the DLFP scheduler.

``AsyncLLM`` keeps its engine core (and so the scheduler) in a process of its
own; this module builds it, turns OpenAI-level options into ``SamplingParams``,
streams ``RequestOutput`` deltas back as plain ``GenerationChunk`` objects, and
reaches the scheduler through ``engine_worker.channel``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine_worker.additional_config import DLFP_KEY, exempt_dlfp_from_hash
from engine_worker.api import (
    ChatOutput,
    ChoiceDelta,
    EngineDeadError,
    EngineInfo,
    EngineNotReadyError,
    GenerationChunk,
    GrammarKind,
    InvalidRequestError,
    PromptTooLongError,
    RequestStream,
    SamplingOptions,
    TokenLogprob,
)
from engine_worker.cpu_features import (
    cpu_family_model,
    cpu_model_name,
    read_cpu_flags,
    reported_features,
    resolve_dtype,
)
from engine_worker.dlfp_config import Device, DLFPConfig
from engine_worker.grammar_check import GrammarVetter
from engine_worker.prompt_prefix import (
    Bound,
    Cut,
    class_bound,
    cut_before_space,
    encode_within,
    no_bound,
    piece_cut,
)
from engine_worker.tokenizer_guard import held_if

logger = logging.getLogger("dlfp.engine")

MULTIPROC_METHOD_ENV = "VLLM_WORKER_MULTIPROC_METHOD"
"""How vLLM starts its engine core and workers: ``fork`` (its default) or ``spawn``."""

ENGINE_STOP_TIMEOUT_S = 15.0
"""How long the engine core gets to stop before vLLM kills it: its own teardown waits
5 s for its workers, then sends them SIGTERM and waits 4 s more; vLLM's default of 5 s
killed it while it waited, before it unlinked its shared memory."""


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
    """Time budget of the cost model's fit at start (``engine_worker.startup_fit``); 0 = none."""


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
    (``engine_worker.additional_config``)."""
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
    from engine_worker.worker_extension import EXTENSION_CLS

    parallel = vllm_config.parallel_config
    if parallel.worker_extension_cls not in ("", EXTENSION_CLS):
        logger.warning(
            "a worker extension of your own: no device step timing, and no stage buffers on CPU",
            extra={
                "event": "device_timer_unavailable",
                "reason": "worker_extension_cls",
                "worker_extension_cls": str(parallel.worker_extension_cls),
            },
        )
        return False
    parallel.worker_extension_cls = EXTENSION_CLS
    return True


def _sampling_params(options: SamplingOptions) -> Any:
    from vllm.sampling_params import RequestOutputKind, SamplingParams, StructuredOutputsParams

    structured = None
    if options.json_schema is not None:
        structured = StructuredOutputsParams(json=options.json_schema)
    elif options.json_object:
        structured = StructuredOutputsParams(json_object=True)
    if options.structural_tag is not None:
        structured = StructuredOutputsParams(structural_tag=options.structural_tag)
    optional = {
        name: value
        for name in ("top_k", "min_p", "repetition_penalty", "logit_bias", "watermarking")
        if (value := getattr(options, name)) is not None
    }
    if options.allowed_token_ids is not None:
        optional["allowed_token_ids"] = list(options.allowed_token_ids)
    return SamplingParams(
        n=options.n,
        max_tokens=options.max_tokens,
        min_tokens=options.min_tokens,
        temperature=options.temperature,
        top_p=options.top_p,
        skip_special_tokens=options.skip_special_tokens,
        spaces_between_special_tokens=options.spaces_between_special_tokens,
        **optional,
        seed=options.seed,
        stop=list(options.stop) or None,
        stop_token_ids=list(options.stop_token_ids) or None,
        include_stop_str_in_output=options.include_stop_str_in_output,
        bad_words=list(options.bad_words) or None,
        presence_penalty=options.presence_penalty,
        frequency_penalty=options.frequency_penalty,
        logprobs=options.logprobs,
        ignore_eos=options.ignore_eos,
        structured_outputs=structured,
        output_kind=RequestOutputKind.DELTA,
    )


def _logprobs(token_ids: list[int], entries: Any) -> list[TokenLogprob] | None:
    if entries is None:
        return None
    out = []
    for token_id, by_id in zip(token_ids, entries, strict=False):
        chosen = by_id[token_id]
        top = sorted(by_id.values(), key=lambda lp: lp.rank or 0)
        out.append(
            TokenLogprob(
                token=chosen.decoded_token or "",
                logprob=float(chosen.logprob),
                top=tuple((lp.decoded_token or "", float(lp.logprob)) for lp in top),
            )
        )
    return out


def _chunk(output: Any) -> GenerationChunk:
    choices = [
        ChoiceDelta(
            index=c.index,
            text=c.text,
            token_ids=list(c.token_ids),
            logprobs=_logprobs(list(c.token_ids), c.logprobs),
            finish_reason=c.finish_reason if c.finished() else None,
        )
        for c in output.outputs
    ]
    return GenerationChunk(
        choices=choices,
        num_prompt_tokens=len(output.prompt_token_ids or ()),
        finished=bool(output.finished),
        num_cached_tokens=int(output.num_cached_tokens or 0),
    )


class _VLLMRequestStream(RequestStream):
    """A request's outputs from vLLM's per-request collector."""

    def __init__(self, collector: Any, abort: Callable[..., Awaitable[None]]) -> None:
        super().__init__()
        self._collector = collector
        self._abort_in_engine = abort
        self._has_output = False

    async def first_output(self) -> bool:
        # vLLM's output handler puts each output in the collector and sets ``ready``,
        # whoever reads it and whenever.
        if not self._has_output:
            await self._collector.ready.wait()
        output = self._collector.output  # None once read: then ``_next`` says how it went
        return self._has_output or (output is not None and not isinstance(output, Exception))

    async def _next(self) -> GenerationChunk:
        from vllm.v1.engine.exceptions import EngineDeadError as VLLMEngineDead

        collector = self._collector
        try:
            output = collector.get_nowait() or await collector.get()
        except VLLMEngineDead as exc:
            raise EngineDeadError(str(exc)) from exc
        self._has_output = True
        return _chunk(output)

    def _release(self) -> None:
        self._collector.close()

    async def _abort(self) -> None:
        await self._abort_in_engine(self._collector.request_id, internal=True)


def _max_token_bytes(tokenizer: Any) -> int | None:
    """An upper bound on the text one token covers, in UTF-8 bytes: the longest
    vocabulary entry (a byte-level or SentencePiece entry is never shorter in UTF-8
    than the text it stands for). None if the vocabulary is not readable."""
    try:
        vocab = tokenizer.get_vocab()
    except Exception:  # not every tokenizer exposes it; then no early size check
        return None
    return max((len(str(entry).encode("utf-8")) for entry in vocab), default=None)


def _kill_engine_processes() -> None:
    """Kill the engine-core processes this process started, and their workers."""
    import multiprocessing

    from vllm.utils.system_utils import kill_process_tree

    for proc in multiprocessing.active_children():
        if proc.name.startswith("EngineCore") and proc.pid is not None:
            logger.info(
                "stopping an engine still starting",
                extra={"event": "engine_start_aborted", "pid": proc.pid},
            )
            kill_process_tree(proc.pid)
            proc.join(10)


async def _stop_output_handler(llm: Any) -> None:
    """Cancel the task that reads the engine core's outputs, before the core stops.

    NOTE: ``AsyncLLM.shutdown`` stops the engine core first and cancels this task after;
    in between the task reads the core's death as an ``EngineDeadError`` and logs it
    with a traceback ("AsyncLLM output_handler failed"). By now no stream is left.
    """
    task = getattr(llm, "output_handler", None)
    if task is None or task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _is_catching_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (Linux ``/proc``; True if unknown)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    except (OSError, ValueError):
        pass
    return True


def _wait_for_exiting_engine_cores(timeout_s: float) -> None:
    """Let an engine core that is already stopping finish before vLLM signals it.

    NOTE: a terminal's Ctrl-C reaches the whole process group, so the engine core gets
    SIGINT too and starts its own teardown, which resets SIGTERM to the default first.
    The SIGTERM that ``AsyncLLM.shutdown`` then sends would kill it mid-teardown: its
    workers orphaned, the shared memory it created never unlinked ("leaked
    shared_memory" from the resource tracker it shares with this process).
    """
    import multiprocessing

    for proc in multiprocessing.active_children():
        pid = proc.pid
        if proc.name.startswith("EngineCore") and pid is not None and not _is_catching_sigterm(pid):
            proc.join(timeout_s)


def _async_llm_class() -> Any:
    """``AsyncLLM`` whose ``__del__`` does nothing once it has been shut down.

    NOTE: the engine is built in a worker thread, and imports made during the build
    keep frames of that thread alive (through ``f_back``) until the interpreter exits,
    their locals with them, the AsyncLLM among them. vLLM's ``__del__`` shuts it down
    again then, after module globals are cleared ("TypeError: 'NoneType' object is not
    callable"). ``shutdown`` here is explicit, so a second one is never needed.
    """
    from vllm.v1.engine.async_llm import AsyncLLM

    class GatewayAsyncLLM(AsyncLLM):  # type: ignore[misc]
        _is_shut_down = False

        def shutdown(self, timeout: float | None = None) -> None:
            self._is_shut_down = True
            super().shutdown(timeout=timeout)

        def __del__(self) -> None:
            if not self._is_shut_down:
                super().__del__()

    return GatewayAsyncLLM


def prefix_cut(tokenizer: Any) -> Cut:
    """Where a prompt's prefix may be cut (``prompt_prefix``): at the tokenizer's own
    pieces where a fast tokenizer has a pre-tokenizer and no normalizer, else at spaces."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    pre = getattr(backend, "pre_tokenizer", None)
    if pre is None or getattr(backend, "normalizer", None) is not None:
        return cut_before_space
    return piece_cut(pre.pre_tokenize_str)


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's map from bytes to printable characters, inverted: the character a
    byte-level BPE vocabulary writes for each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [b for b in range(256) if b not in printable]
    chars = {chr(b): b for b in printable}
    chars |= {chr(256 + i): b for i, b in enumerate(others)}
    return chars


def token_bound(tokenizer: Any) -> Bound:
    """``prompt_prefix.class_bound`` for a byte-level BPE tokenizer with no normalizer,
    whose tokens are runs of the text's own bytes; no bound for any other."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or backend.normalizer is not None:
        return no_bound
    if "ByteLevel" not in str(backend.pre_tokenizer) or type(backend.model).__name__ != "BPE":
        return no_bound
    alphabet = _byte_level_alphabet()

    def token_bytes(token: str) -> bytes:
        if all(c in alphabet for c in token):
            return bytes(alphabet[c] for c in token)
        return token.encode("utf-8", "replace")  # an added token, written as text

    return class_bound(token_bytes(t) for t in backend.get_vocab(with_added_tokens=True))


class VLLMEngine:
    """``AsyncLLM`` with the DLFP scheduler, behind the gateway's ``Engine`` protocol."""

    def __init__(self, spec: EngineSpec) -> None:
        self.spec = spec
        self.info = EngineInfo(spec.served_model_name, spec.max_model_len, spec.device)
        self._llm: Any = None
        self._tokenizer: Any = None
        self._cut: Cut = cut_before_space
        self._bound: Bound = no_bound
        # NOTE: HF fast tokenizers are not safe to call from several threads at once
        # (they may set truncation and padding state: "Already borrowed").
        self._tokenizer_lock = threading.Lock()
        self._channel: Any = None
        self._closed = False
        self._needs_stage_buffers = False
        self._has_worker_extension = False
        self._step_ring: Any = None
        self._chat_template: str | None = None
        self._parser_cls: Any = None
        self._compact_json = False
        self._grammar: GrammarVetter | None = None

    @property
    def is_ready(self) -> bool:
        return self._llm is not None and not self.is_dead

    @property
    def is_dead(self) -> bool:
        return self._closed or (self._llm is not None and bool(self._llm.errored))

    @property
    def num_unfinished_requests(self) -> int:
        if self._llm is None:
            return 0
        return int(self._llm.output_processor.get_num_unfinished_requests())

    async def start(self) -> None:
        """Build the engine in a worker thread: the event loop keeps serving /health."""
        try:
            await self._start()
        except BaseException:
            self._close_step_ring()  # no segment outlives a failed start
            raise

    async def _start(self) -> None:
        llm = await asyncio.to_thread(self._build)
        if self._needs_stage_buffers:
            from engine_worker.worker_extension import ALLOCATE_METHOD

            await llm.collective_rpc(ALLOCATE_METHOD)
        if self.spec.device == "cpu":
            await self._guard_seeded_sampling(llm)
        self._tokenizer = llm.get_tokenizer()
        self._cut = prefix_cut(self._tokenizer)
        self._bound = token_bound(self._tokenizer)
        self.info.max_token_bytes = await asyncio.to_thread(_max_token_bytes, self._tokenizer)
        await asyncio.to_thread(self._prepare_chat, llm)
        structured = llm.vllm_config.structured_outputs_config
        if structured.backend == "xgrammar":  # the vetter compiles as xgrammar does
            self._grammar = GrammarVetter(
                self.spec.model,
                timeout_s=self.spec.grammar_compile_timeout_s,
                vocab_size=llm.model_config.get_vocab_size(),
                any_whitespace=not structured.disable_any_whitespace,
            )
        if self.spec.use_dlfp_scheduler:
            from engine_worker.channel import DLFPChannel

            self._channel = DLFPChannel(llm)
            if self._has_worker_extension:
                await self._install_device_timer(llm, self._channel)
            if self.spec.startup_fit_s > 0:  # before is_ready: /ready stays 503 meanwhile
                from engine_worker.startup_fit import run_startup_fit

                await run_startup_fit(
                    llm,
                    self._channel,
                    budget_s=self.spec.startup_fit_s,
                    max_model_len=self.spec.max_model_len,
                )
        self._llm = llm
        logger.info("engine ready", extra={"event": "engine_ready", "model": self.info.model_name})

    async def _guard_seeded_sampling(self, llm: Any) -> None:
        """On the CPU, a seeded request prefilled in chunks would fail the worker
        (``seeded_sampling``); the guard needs the gateway's worker extension."""
        if not self._has_worker_extension:
            logger.warning(
                "seeded requests whose prompt is prefilled in chunks can fail the CPU engine",
                extra={"event": "seeded_sampling_unguarded", "reason": "worker_extension_cls"},
            )
            return
        from engine_worker.worker_extension import GUARD_SEEDED_METHOD

        await llm.collective_rpc(GUARD_SEEDED_METHOD)

    async def _install_device_timer(self, llm: Any, channel: Any) -> None:
        """The ring of device step times (``step_ring``), its writers and its reader.

        The gateway process owns the segment: created here, unlinked at shutdown.
        """
        from engine_worker.step_ring import StepRing
        from engine_worker.worker_extension import INSTALL_TIMER_METHOD

        try:
            ring = self._step_ring = StepRing.create()
        except OSError as exc:  # no shared memory here (a /dev/shm too small, or none)
            logger.warning(
                "device step timing unavailable: observation device falls back to completion",
                extra={"event": "device_timer_unavailable", "reason": f"shared memory: {exc}"},
            )
            return
        try:
            writers = await llm.collective_rpc(
                INSTALL_TIMER_METHOD, args=(ring.name, ring.num_slots)
            )
        except Exception as exc:  # an executor that cannot reach the extension
            writers, reason = [], f"install failed: {exc}"
        else:
            reason = "no worker writes step times"
        if not any(writers):
            logger.warning(
                "device step timing unavailable: observation device falls back to completion",
                extra={"event": "device_timer_unavailable", "reason": reason},
            )
            self._close_step_ring()
            return
        await channel.attach_step_ring(ring.name, ring.num_slots)
        logger.info(
            "device step timing on",
            extra={"event": "device_timer", "shared_memory": ring.name, "slots": ring.num_slots},
        )

    def _close_step_ring(self) -> None:
        ring, self._step_ring = self._step_ring, None
        if ring is not None:
            ring.close()

    def _build(self) -> Any:
        from vllm.usage.usage_lib import UsageContext

        if not self.spec.model:
            from engine_worker.embedded_model import ensure_embedded_model

            self.spec.model = str(ensure_embedded_model(self.spec.model_cache_dir))
        if self.spec.device == "cpu":
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{self.spec.kv_cache_gib:g}")
        if self.spec.device == "cuda":
            _spawn_engine_processes()
        self._resolve_dtype()
        context = UsageContext.OPENAI_API_SERVER
        vllm_config = _engine_config(self.spec, context)
        self._has_worker_extension = _add_worker_extension(vllm_config)
        if self.spec.device == "cpu":
            _bind_cpu_workers(vllm_config.parallel_config.world_size)
            _honour_async_scheduling(vllm_config, self.spec.engine_args)
            pipelined = vllm_config.parallel_config.pipeline_parallel_size > 1
            self._needs_stage_buffers = self._has_worker_extension and pipelined
        if self.spec.use_dlfp_scheduler:
            # NOTE: the platform has the last word on async scheduling (CPU forces it
            # off), so the subclass is picked from the resolved config, not the args.
            from engine_worker.scheduler import scheduler_cls_name

            is_async = bool(vllm_config.scheduler_config.async_scheduling)
            vllm_config.scheduler_config.scheduler_cls = scheduler_cls_name(is_async)
        self.info.async_scheduling = bool(vllm_config.scheduler_config.async_scheduling)
        self.info.batch_queue_size = int(vllm_config.max_concurrent_batches)
        self.info.priority_scheduling = vllm_config.scheduler_config.policy == "priority"
        llm = _async_llm_class().from_vllm_config(
            vllm_config=vllm_config,
            usage_context=context,
            stat_loggers=self.spec.stat_loggers or None,
            disable_log_stats=False,
        )
        if self._closed:
            # NOTE: shutdown() was called while this thread was still building: the
            # engine-core process exists now and nobody else will stop it.
            llm.shutdown()
            raise EngineDeadError("the engine was shut down while starting")
        return llm

    def _resolve_dtype(self) -> None:
        flags = read_cpu_flags()
        requested = self.spec.dtype
        self.spec.dtype = resolve_dtype(requested, self.spec.device, flags)
        features = reported_features(flags)
        self.info.dtype, self.info.cpu_features = self.spec.dtype, list(features)
        logger.info(
            "engine configuration",
            extra={
                "event": "engine_config",
                "device": self.spec.device,
                "dtype_requested": requested,
                "dtype": self.spec.dtype,
                "cpu_model": cpu_model_name(),
                "cpu_family_model": cpu_family_model(),
                "cpu_features": features,
            },
        )

    async def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._grammar is not None:
            await self._grammar.close()
        if self._llm is None:
            # Still building (or never started): no AsyncLLM to shut down yet, but its
            # engine-core process may exist. Stop it now rather than wait for the build,
            # which a second signal could cut short and orphan the process.
            await asyncio.to_thread(_kill_engine_processes)
        llm, self._llm = self._llm, None
        self._channel = None  # it holds the AsyncLLM too
        try:
            if llm is not None:
                await _stop_output_handler(llm)
                await asyncio.to_thread(_wait_for_exiting_engine_cores, ENGINE_STOP_TIMEOUT_S)
                await asyncio.to_thread(llm.shutdown, ENGINE_STOP_TIMEOUT_S)
                del llm
                logger.info("engine stopped", extra={"event": "engine_stopped"})
        finally:
            self._close_step_ring()

    def _require(self) -> Any:
        if self.is_dead:
            raise EngineDeadError("the engine is not running")
        if self._llm is None:
            raise EngineNotReadyError("the engine is still loading")
        return self._llm

    def _prepare_chat(self, llm: Any) -> None:
        """Sampling defaults, the chat template and the output parsers, once at start."""
        from engine_worker.output_parser import parser_class

        model_config = llm.model_config
        structured = llm.vllm_config.structured_outputs_config
        self._compact_json = bool(getattr(structured, "disable_any_whitespace", False))
        self.info.root = self.spec.model
        self.info.sampling_defaults = dict(model_config.get_diff_sampling_param())
        if self.spec.chat_template is not None:
            self._chat_template = self.spec.chat_template.read_text()
        self._parser_cls = parser_class(
            self.spec.tool_call_parser,
            self.spec.reasoning_parser,
            self._tokenizer,
            self.spec.served_model_name,
        )

    def chat_output(self, request: dict[str, Any], prompt_token_ids: list[int]) -> ChatOutput:
        from engine_worker.output_parser import chat_output

        self._require()
        with self._tokenizer_lock:
            return chat_output(
                self._parser_cls, self._tokenizer, request, prompt_token_ids, self._compact_json
            )

    @property
    def tokenizer_lock(self) -> threading.Lock:
        return self._tokenizer_lock

    def render_chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
    ) -> list[int]:
        """Thread-safe (the gateway calls it off the event loop); InvalidRequestError
        for a conversation the model's template refuses. The template is applied whole
        (cheap beside BPE); ``max_tokens`` bounds the tokenizing, as in ``tokenize``."""
        from jinja2 import TemplateError

        from engine_worker.output_parser import template_messages

        self._require()
        extra: dict[str, Any] = {"tools": tools} if tools else {}
        if self._chat_template is not None:
            extra["chat_template"] = self._chat_template
        try:
            with self._tokenizer_lock:
                text = self._tokenizer.apply_chat_template(
                    template_messages(messages),
                    add_generation_prompt=True,
                    tokenize=False,
                    **extra,
                )
                return encode_within(
                    text, max_tokens, self._encode_rendered, self._cut, self._bound
                )
        except PromptTooLongError:
            raise
        except (TemplateError, ValueError, TypeError, KeyError, RecursionError) as exc:
            # RecursionError: a value nested past what the template's JSON can write.
            raise InvalidRequestError(
                f"cannot render the conversation: {exc}", param="messages"
            ) from exc

    def _encode_rendered(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def tokenize(self, text: str, max_tokens: int | None = None) -> list[int]:
        """Thread-safe; InvalidRequestError for text the tokenizer refuses (a lone
        surrogate raises TypeError in the Rust tokenizer); with ``max_tokens``, a text
        a prefix proves longer raises PromptTooLongError (``prompt_prefix``)."""
        self._require()
        try:
            with self._tokenizer_lock:
                return encode_within(text, max_tokens, self._encode, self._cut, self._bound)
        except PromptTooLongError:
            raise
        except (ValueError, TypeError) as exc:
            raise InvalidRequestError(f"cannot tokenize the prompt: {exc}", param="prompt") from exc

    def _encode(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text))

    async def submit(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        options: SamplingOptions,
        priority: int = 0,
        cache_salt: str | None = None,
    ) -> RequestStream:
        from vllm.exceptions import VLLMClientError
        from vllm.v1.engine.exceptions import EngineDeadError as VLLMEngineDead

        llm = self._require()
        prompt: dict[str, Any] = {"prompt_token_ids": prompt_token_ids}
        if cache_salt is not None:
            prompt["cache_salt"] = cache_salt
        try:
            params = _sampling_params(options)
            # NOTE: vLLM tokenizes a request's bad words in its renderer's worker thread,
            # and HF fast tokenizers must not run in two threads at once.
            async with held_if(bool(options.bad_words), self._tokenizer_lock):
                collector = await llm.add_request(request_id, prompt, params, priority=priority)
        except BaseException as exc:
            # NOTE: vLLM registers the request in its output processor before it sends it
            # to the engine core; a failure after that (msgspec refusing a field, a
            # cancel) would keep its prompt and detokenizer state for good. Aborting an
            # id vLLM never registered is a no-op, so every failure aborts.
            await self._abort(request_id, internal=False)
            if isinstance(exc, VLLMEngineDead):
                raise EngineDeadError(str(exc)) from exc
            if isinstance(exc, ValueError | TypeError | VLLMClientError):
                # vLLM's own input checks (token ids out of vocabulary, bad schema, ...);
                # its VLLMValidationError names the field (stop_token_ids, bad_words, ...).
                raise InvalidRequestError(str(exc), getattr(exc, "parameter", None)) from exc
            raise
        return _VLLMRequestStream(collector, self._abort)

    async def _abort(self, request_id: str, *, internal: bool) -> None:
        """The one abort: of a failed submission (by the gateway's id) and of a stream
        ended early (``internal``: by vLLM's own id of it). Shielded, since the caller is
        often a task being cancelled; a no-op once the engine is dead."""
        if self._llm is None or self.is_dead:
            return
        try:
            await asyncio.shield(self._llm.abort(request_id, internal=internal))
        except Exception:
            logger.exception(
                "engine abort failed", extra={"event": "abort_failed", "request_id": request_id}
            )

    async def check_grammar(self, kind: GrammarKind, spec: str) -> None:
        """Compiled first in the vetter's own worker (killed at the time-out), since
        vLLM's compile cannot be interrupted; a no-op with a backend other than xgrammar."""
        self._require()
        if self._grammar is not None:
            await self._grammar.check(kind, spec)

    def _dlfp(self) -> Any:
        self._require()
        if self._channel is None:
            raise InvalidRequestError("this engine runs vLLM's own scheduler, not DLFP")
        return self._channel

    async def get_dlfp_state(self) -> dict[str, Any]:
        state: dict[str, Any] = await self._dlfp().get_state()
        return state

    async def apply_dlfp_config(self, config: DLFPConfig) -> dict[str, Any]:
        state: dict[str, Any] = await self._dlfp().apply_config(config)
        return state

    async def get_dlfp_steps(self, since_step: int) -> list[dict[str, Any]]:
        steps: list[dict[str, Any]] = await self._dlfp().get_steps(since_step)
        return steps

    async def reset_dlfp(self, *, model: bool = False) -> dict[str, Any]:
        state: dict[str, Any] = await self._dlfp().reset(model)
        return state
