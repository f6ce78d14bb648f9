"""The real engine: vLLM's ``AsyncLLM`` running the DLFP scheduler.

``AsyncLLM`` keeps its engine core (and so the scheduler) in a process of its
own; ``VLLMEngine`` builds it (``engine_args``), submits requests and streams their
outputs back (``request_stream``), templates and tokenizes (``templating``), and
reaches the scheduler through its control plane (``control_plane``, ``channel``).
The scheduler and the worker extension are named to vLLM by their paths
(``contract.engine_hooks``), so nothing of them is imported in this process.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any

from engine_worker.client.control_plane import DLFPControlPlane
from engine_worker.client.cpu_features import configured_dtype
from engine_worker.client.engine_args import (
    EngineSpec,
    _add_worker_extension,
    _bind_cpu_workers,
    _engine_config,
    _honour_async_scheduling,
    _spawn_engine_processes,
)
from engine_worker.client.engine_processes import (
    ENGINE_STOP_TIMEOUT_S,
    _async_llm_class,
    _kill_engine_processes,
    _stop_output_handler,
    _wait_for_exiting_engine_cores,
)
from engine_worker.client.grammar_check import GrammarVetter
from engine_worker.client.prompt_prefix import Bound, Cut, cut_before_space, no_bound
from engine_worker.client.request_stream import _sampling_params, _VLLMRequestStream
from engine_worker.client.templating import (
    ChatTemplating,
    _max_token_bytes,
    prefix_cut,
    token_bound,
)
from engine_worker.client.tokenizer_guard import held_if
from engine_worker.contract.api import (
    EngineDeadError,
    EngineInfo,
    EngineNotReadyError,
    GrammarKind,
    InvalidRequestError,
    RequestStream,
    SamplingOptions,
)
from engine_worker.contract.engine_hooks import (
    ALLOCATE_METHOD,
    GUARD_SEEDED_METHOD,
    scheduler_cls_name,
)

logger = logging.getLogger("dlfp.engine")

__all__ = ["EngineSpec", "VLLMEngine"]


class VLLMEngine(ChatTemplating, DLFPControlPlane):
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
            await llm.collective_rpc(ALLOCATE_METHOD)
        if self.spec.device == "cpu":
            await self._guard_seeded_sampling(llm)
        self._tokenizer = llm.get_tokenizer()
        self._cut = prefix_cut(self._tokenizer)
        self._bound = await asyncio.to_thread(token_bound, self._tokenizer)
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
            from engine_worker.client.channel import DLFPChannel

            self._channel = DLFPChannel(llm)
            if self._has_worker_extension:
                await self._install_device_timer(llm, self._channel)
            if self.spec.startup_fit_s > 0:  # before is_ready: /ready stays 503 meanwhile
                from engine_worker.client.startup_fit import run_startup_fit

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
        await llm.collective_rpc(GUARD_SEEDED_METHOD)

    def _build(self) -> Any:
        from vllm.usage.usage_lib import UsageContext

        if not self.spec.model:
            from engine_worker.client.embedded_model import ensure_embedded_model

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
        self.spec.dtype, features = configured_dtype(self.spec.dtype, self.spec.device)
        self.info.dtype, self.info.cpu_features = self.spec.dtype, features

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
