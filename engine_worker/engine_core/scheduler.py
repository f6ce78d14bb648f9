"""DLFP schedulers: vLLM's own scheduler, with the prefill chunk capped beside decodes.

``DLFPScheduler`` extends ``vllm.v1.core.sched.scheduler.Scheduler`` and
``DLFPAsyncScheduler`` extends ``AsyncScheduler``, both through one mixin that
only sets two knobs around ``super().schedule()`` and times completions in
``update_from_output``. Its parts have modules of their own: the capped step
(``capped_step``), the prefill candidates (``prefill_selection``) and the ``dlfp_*``
control-plane methods (``control_plane``). Pick the class with ``scheduler_cls_name`` once the
``VllmConfig`` exists (the platform has the last word on async scheduling;
``contract.engine_hooks``).

The initial settings come from ``vllm_config.additional_config``
(``additional_config.read_dlfp_config``; absent = defaults). Importing this module installs
the ``dlfp_*`` utility methods on vLLM's ``EngineCore`` (see ``utilities``); vLLM
imports it inside the engine-core process when it resolves ``scheduler_cls``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from vllm.logger import init_logger
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.engine import EngineCoreOutputs
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request

from engine_worker.contract.additional_config import read_dlfp_config
from engine_worker.contract.dlfp_config import ControllerMode, Observation
from engine_worker.contract.step_ring import STEP_INDEX_ATTR, StepRing
from engine_worker.controller.cap_controller import PrefillCapController
from engine_worker.controller.cost_model import StepShape, chunk_attention
from engine_worker.controller.step_timing import StepRecord
from engine_worker.engine_core.capped_step import CappedStepMixin, is_decoding, needs_decodes_first
from engine_worker.engine_core.control_plane import ControlPlaneMixin
from engine_worker.engine_core.prefill_order import Candidate
from engine_worker.engine_core.prefill_selection import PrefillSelectionMixin
from engine_worker.engine_core.utilities import install_engine_core_utilities

__all__ = [
    "DLFPAsyncScheduler",
    "DLFPScheduler",
    "DLFPSchedulerMixin",
    "is_decoding",
    "needs_decodes_first",
]

logger = init_logger(__name__)

MAX_STEP_HISTORY = 4096
"""Steps kept in the telemetry ring buffer."""


# NOTE: the mixin subclasses Scheduler so that both MROs work: DLFPAsyncScheduler
# resolves to (mixin, AsyncScheduler, Scheduler), so super() in the mixin
# reaches AsyncScheduler's hooks. (The ignore is for mypy runs that skip vLLM.)
class DLFPSchedulerMixin(  # type: ignore[misc, unused-ignore]
    ControlPlaneMixin, PrefillSelectionMixin, CappedStepMixin
):
    """Caps prefill tokens while any request decodes; otherwise plain vLLM."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dlfp_controller = PrefillCapController(
            read_dlfp_config(self.vllm_config.additional_config).to_params(),
            completion_lag_steps=self._steps_between_tokens(),
        )
        self._dlfp_steps: deque[StepRecord] = deque(maxlen=MAX_STEP_HISTORY)
        # Consecutive capped steps each prefill in progress went without tokens.
        self._num_held_steps: dict[str, int] = {}
        # The step that produced (or will produce) each running stream's last token.
        self._token_steps: dict[str, int] = {}
        self._own_objectives = {}
        # The workers' device times (attached by the gateway, see step_ring).
        self._step_ring: StepRing | None = None
        self._has_warned_no_device_time = False
        if self.scheduler_config.async_scheduling != isinstance(self, AsyncScheduler):
            logger.warning(
                "%s does not match async_scheduling=%s; use scheduler_cls_name()",
                type(self).__name__,
                self.scheduler_config.async_scheduling,
            )
        self._warn_if_cap_exceeds_budget()
        logger.info("DLFP scheduler %s with %s", type(self).__name__, self.dlfp_params)

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        # NOTE: is_decoding inlined: this runs over every running request each step.
        decodes = [request for request in self.running if not request.is_prefill_chunk]
        # NOTE: with nothing to prefill the step is vLLM's own (no candidates, no queue
        # to reorder); the controller still sees the step.
        has_prefills = len(decodes) < len(self.running) or bool(self.waiting)
        plans_deadlines = self.dlfp_controller.params.plans_deadlines
        now_unix_s = time.time() if plans_deadlines and has_prefills else 0.0
        # vLLM's own order under no cap: nothing to plan or select.
        is_capping = has_prefills and decodes and self.dlfp_params.controller != ControllerMode.OFF
        candidates = self._prefill_candidates(now_unix_s) if is_capping else []
        oldest_step, own_deadlines = (
            self._token_steps_by_objective(decodes, candidates) if plans_deadlines else (None, [])
        )
        cap_tokens = self.dlfp_controller.on_schedule(
            len(decodes),
            candidates=[(c.computed_tokens, c.remaining_tokens) for c in candidates],
            decode_context_tokens=sum(r.num_computed_tokens for r in decodes),
            oldest_token_step=oldest_step,
            own_deadlines=own_deadlines,
            ttft_overdue=plans_deadlines and self._is_ttft_overdue(candidates, now_unix_s),
            head_ttft_left_s=self._head_ttft_left_s(candidates, now_unix_s),
            ttft_needed_rate=self._ttft_needed_rate if candidates else None,
            ttft_paced_rate=self._ttft_paced_rate if candidates else None,
        )
        if cap_tokens is None or not has_prefills:
            cap_tokens = None
            output = super().schedule(*args, **kwargs)
        else:
            output = self._schedule_capped(cap_tokens, decodes, candidates, *args, **kwargs)
        return self._record(output, decodes, cap_tokens)

    def _record(
        self, output: SchedulerOutput, decodes: list[Request], cap_tokens: int | None
    ) -> SchedulerOutput:
        """The step's record for the controller and the telemetry, its index on the output."""
        shape, token_ids = self._step_shape(output, decodes)
        record = self.dlfp_controller.on_scheduled(
            shape.num_prefill_tokens, shape.num_decode_tokens, shape=shape
        )
        self._dlfp_steps.append(record)
        # The worker that executes the step writes its device time under this index.
        setattr(output, STEP_INDEX_ATTR, record.step_index)
        self._note_token_steps(output, token_ids, record.step_index)
        if cap_tokens is not None:
            self._count_held_steps(output)
        return output

    def update_from_output(
        self, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput
    ) -> dict[int, EngineCoreOutputs]:
        # NOTE: first statement on purpose: the earliest point in the
        # engine-core process where the step is known complete (after
        # future.result()); our own output processing must not count. The
        # controller's clock, which a harness may drive (bench overhead's plant).
        done_s = self.dlfp_controller.now_s()
        device_s = self._device_s(scheduler_output)
        self.dlfp_controller.on_step_done(done_s, device_s=device_s)
        outputs: dict[int, EngineCoreOutputs] = super().update_from_output(
            scheduler_output, model_runner_output
        )
        return outputs

    def _device_s(self, scheduler_output: SchedulerOutput) -> float | None:
        """The step's device time from the ring, or None (a warning once, for ``device``)."""
        step_index = getattr(scheduler_output, STEP_INDEX_ATTR, None)
        ring = self._step_ring
        device_s = None if ring is None or step_index is None else ring.read(step_index)
        is_wanted = self.dlfp_params.observation == Observation.DEVICE
        if device_s is None and is_wanted and not self._has_warned_no_device_time:
            self._has_warned_no_device_time = True
            reason = "no device timer attached" if ring is None else "a step's slot not written"
            logger.warning(
                "DLFP observation device: no device time for step %s (%s); falling back "
                "to completion for such steps",
                step_index,
                reason,
            )
        return device_s

    def _token_steps_by_objective(
        self, decodes: Sequence[Request], candidates: Sequence[Candidate]
    ) -> tuple[int | None, list[tuple[int, float]]]:
        """The step of the oldest last token among the streams that bind this step and
        plan to the controller's ``itl_slo_ms``; and, for the streams with an objective of
        their own (``contract.api.ITL_SLO_ARG``), the oldest step per objective, with it
        in seconds.

        Every decoding stream binds, except under ``priority`` scheduling, where a
        stream of lower priority than the first prefill (a larger value) does not:
        a higher-priority stream's deadline comes first.
        """
        if candidates and self.policy.value == "priority":
            head_priority = candidates[0].request.priority
            decodes = [r for r in decodes if r.priority <= head_priority]
        token_steps = self._token_steps
        objectives = self._own_objectives
        oldest: int | None = None
        own: dict[float, int] = {}
        for request in decodes:
            step = token_steps.get(request.request_id)
            if step is None:
                continue
            entry = objectives.get(request.request_id)
            if entry is None or entry[0] is not request:
                entry = self._objectives_of(request)
            itl_slo_ms = entry[2]
            if itl_slo_ms is None:
                if oldest is None or step < oldest:
                    oldest = step
            elif step < own.get(itl_slo_ms, step + 1):
                own[itl_slo_ms] = step
        return oldest, [(step, itl_slo_ms / 1000.0) for itl_slo_ms, step in own.items()]

    def _note_token_steps(
        self, output: SchedulerOutput, token_ids: Sequence[str], step_index: int
    ) -> None:
        for request_id in token_ids:
            self._token_steps[request_id] = step_index
        for request_id in output.finished_req_ids:
            self._token_steps.pop(request_id, None)
            self._own_objectives.pop(request_id, None)

    def _step_shape(
        self, output: SchedulerOutput, decodes: list[Request]
    ) -> tuple[StepShape, list[str]]:
        """The step's composition for the cost model (after vLLM's bookkeeping), and
        the requests it gives a token: its decodes and the prefills it completes."""
        # NOTE: comprehensions and a set difference at C speed over the decodes; the loop
        # only over the step's few prefills, by id (a set's order varies between runs).
        scheduled = output.num_scheduled_tokens
        decode_ids = [r.request_id for r in decodes]
        token_ids = [request_id for request_id in decode_ids if request_id in scheduled]
        num_decode = sum([scheduled[request_id] for request_id in token_ids])
        num_prefill = 0
        attention = 0.0
        for request_id in sorted(scheduled.keys() - set(decode_ids)):
            num_tokens = scheduled[request_id]
            request = self.requests.get(request_id)
            # num_computed_tokens already counts this step's tokens.
            start = 0 if request is None else max(request.num_computed_tokens - num_tokens, 0)
            num_prefill += num_tokens
            attention += chunk_attention(start, num_tokens)
            if request is not None and request.num_computed_tokens >= request.num_tokens:
                token_ids.append(request_id)
        shape = StepShape(
            num_decode_tokens=num_decode,
            decode_context_tokens=sum([r.num_computed_tokens for r in decodes]) - len(decodes),
            num_prefill_tokens=num_prefill,
            attention_tokens2=attention,
        )
        return shape, token_ids

    def _count_held_steps(self, output: SchedulerOutput) -> None:
        scheduled = output.num_scheduled_tokens
        # NOTE: is_decoding inlined (every running request, every capped step).
        in_progress = [r for r in self.running if r.is_prefill_chunk and r.num_computed_tokens]
        self._num_held_steps = {
            r.request_id: self._num_held_steps.get(r.request_id, 0) + 1
            for r in in_progress
            if r.request_id not in scheduled
        }

    def _steps_between_tokens(self) -> int:
        """Steps from one step of a decoding request to its next (1 unless noted).

        NOTE: on a batch queue of D, vLLM's synchronous ``Scheduler`` cannot
        schedule a request whose step is still in flight (no output
        placeholders), so each decode sits in every D-th step (the CPU's
        pipeline engine). The async one schedules it in every step, except under
        Model Runner V2 (CUDA's default), which staggers decodes over the
        pipeline stages: a batch queue of ``pp_size + 1`` and each decode
        eligible again ``decode_stagger`` (``pp_size``) steps after its last.
        """
        if isinstance(self, AsyncScheduler):
            if getattr(self, "use_v2_model_runner", False):
                return max(int(getattr(self, "decode_stagger", 1)), 1)
            return 1
        return max(int(self.vllm_config.max_concurrent_batches), 1)

    def _warn_if_cap_exceeds_budget(self) -> None:
        """A cap above the step budget less a full batch of decodes is out of reach when
        every slot decodes: ``max_cap_tokens`` should stay within it."""
        decode_slots = self.max_num_running_reqs * (1 + self.num_spec_tokens)
        room = self.max_num_scheduled_tokens - decode_slots
        if self.dlfp_params.max_cap_tokens > room:
            logger.warning(
                "DLFP max_cap_tokens=%d exceeds the step budget %d less %d decode slots; "
                "raise max_num_batched_tokens for the cap to have any effect up there",
                self.dlfp_params.max_cap_tokens,
                self.max_num_scheduled_tokens,
                decode_slots,
            )


class DLFPScheduler(DLFPSchedulerMixin):
    """DLFP over vLLM's synchronous ``Scheduler`` (CPU, or async scheduling off)."""


class DLFPAsyncScheduler(DLFPSchedulerMixin, AsyncScheduler):  # type: ignore[misc, unused-ignore]
    """DLFP over vLLM's ``AsyncScheduler`` (GPU with async scheduling)."""


install_engine_core_utilities()
