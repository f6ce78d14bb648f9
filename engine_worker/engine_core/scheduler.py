"""DLFP schedulers: vLLM's own scheduler, with the prefill chunk capped beside decodes.

``DLFPScheduler`` extends ``vllm.v1.core.sched.scheduler.Scheduler`` and
``DLFPAsyncScheduler`` extends ``AsyncScheduler``, both through one mixin that
only sets two knobs around ``super().schedule()`` and times completions in
``update_from_output``. Pick the class with ``scheduler_cls_name`` once the
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
from collections.abc import Iterable, Sequence
from typing import Any

from vllm.logger import init_logger
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.request_queue import FCFSRequestQueue
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.engine import EngineCoreOutputs
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus

from engine_worker.contract.additional_config import read_dlfp_config
from engine_worker.contract.dlfp_config import ControllerMode, DLFPConfig, Observation, PrefillOrder
from engine_worker.contract.step_ring import STEP_INDEX_ATTR, StepRing
from engine_worker.controller.cap_controller import PrefillCapController
from engine_worker.controller.cost_model import StepShape, chunk_attention
from engine_worker.controller.step_timing import StepRecord
from engine_worker.engine_core.prefill_order import (
    MAX_HELD_STEPS,
    Candidate,
    Selection,
    candidates_in_order,
    restore_order,
    select,
)
from engine_worker.engine_core.utilities import install_engine_core_utilities

logger = init_logger(__name__)

MAX_STEP_HISTORY = 4096
"""Steps kept in the telemetry ring buffer."""


_SCHEDULABLE = (RequestStatus.WAITING, RequestStatus.PREEMPTED)
"""Waiting statuses vLLM can schedule now (not blocked on a grammar or remote KV)."""


def is_decoding(request: Request) -> bool:
    # NOTE: the same predicate vLLM uses for "a decode is present" in
    # Scheduler.schedule (DP prefill balancing). is_prefill_chunk is set at the
    # end of the previous schedule(): True = the request is still prefilling.
    return not request.is_prefill_chunk


def needs_decodes_first(running: Iterable[Request]) -> bool:
    """Whether some decode sits behind two or more prefills in ``running``.

    With one prefill ahead, the per-request threshold (= cap) leaves the
    decodes' reserved slots in the budget. A second prefill ahead could take
    them, so only then are decodes moved to the front.
    """
    num_prefills_ahead = 0
    for request in running:
        if not is_decoding(request):
            num_prefills_ahead += 1
        elif num_prefills_ahead >= 2:
            return True
    return False


# NOTE: the mixin subclasses Scheduler so that both MROs work: DLFPAsyncScheduler
# resolves to (mixin, AsyncScheduler, Scheduler), so super() in the mixin
# reaches AsyncScheduler's hooks. (The ignore is for mypy runs that skip vLLM.)
class DLFPSchedulerMixin(Scheduler):  # type: ignore[misc, unused-ignore]
    """Caps prefill tokens while any request decodes; otherwise plain vLLM."""

    # vLLM attributes this mixin overwrites per step, typed for mypy runs that skip vLLM.
    max_num_scheduled_tokens: int
    adaptive_long_prefill_threshold: bool

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dlfp_config = read_dlfp_config(self.vllm_config.additional_config)
        self.dlfp_controller = PrefillCapController.from_config(
            self.dlfp_config, completion_lag_steps=self._steps_between_tokens()
        )
        self._dlfp_steps: deque[StepRecord] = deque(maxlen=MAX_STEP_HISTORY)
        # Consecutive capped steps each prefill in progress went without tokens.
        self._num_held_steps: dict[str, int] = {}
        # The step that produced (or will produce) each running stream's last token.
        self._token_steps: dict[str, int] = {}
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
        logger.info("DLFP scheduler %s with %s", type(self).__name__, self.dlfp_config)

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        decodes = [request for request in self.running if is_decoding(request)]
        plans_deadlines = self.dlfp_controller.params.plans_deadlines
        now_unix_s = time.time() if plans_deadlines else 0.0
        # vLLM's own order under no cap: nothing to plan or select.
        is_capping = decodes and self.dlfp_config.controller != ControllerMode.OFF
        candidates = self._prefill_candidates(now_unix_s) if is_capping else []
        cap_tokens = self.dlfp_controller.on_schedule(
            len(decodes),
            candidates=[(c.computed_tokens, c.remaining_tokens) for c in candidates],
            decode_context_tokens=sum(r.num_computed_tokens for r in decodes),
            oldest_token_step=self._oldest_token_step(decodes, candidates)
            if plans_deadlines
            else None,
            ttft_overdue=plans_deadlines and self._is_ttft_overdue(candidates, now_unix_s),
        )
        if cap_tokens is None:
            output = super().schedule(*args, **kwargs)
        else:
            output = self._schedule_capped(cap_tokens, decodes, candidates, *args, **kwargs)
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
        # future.result()); our own output processing must not count.
        done_s = time.monotonic()
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
        is_wanted = self.dlfp_config.observation == Observation.DEVICE
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

    def _schedule_capped(
        self,
        cap_tokens: int,
        decodes: list[Request],
        candidates: list[Candidate],
        *args: Any,
        **kwargs: Any,
    ) -> SchedulerOutput:
        config = self.scheduler_config
        saved_budget = self.max_num_scheduled_tokens
        saved_threshold = config.long_prefill_token_threshold
        saved_adaptive = self.adaptive_long_prefill_threshold
        # NOTE: budget = every decode's slots + the cap; the per-request
        # threshold stops one prefill from taking the decodes' slots (vLLM's
        # schedule() applies it to running and waiting requests alike). A decode
        # that vLLM skips this step leaves its slot to prefill, so a step may
        # hold a few tokens more than the cap in total, never one request.
        num_decode_slots = len(decodes) * (1 + self.num_spec_tokens)
        self.max_num_scheduled_tokens = min(saved_budget, num_decode_slots + cap_tokens)
        threshold = cap_tokens
        selection: Selection | None = None
        original_running = list(self.running)
        original_waiting: list[Request] = []
        # NOTE: a cap of 0 (nothing fits beside the decodes) holds every prefill out
        # of vLLM's queues for the step: vLLM reads a threshold of 0 as "none".
        if self.dlfp_config.prefill_order == PrefillOrder.SRPF or cap_tokens == 0:
            original_waiting = list(self.waiting)
            selection = select(candidates, cap_tokens)
            threshold = selection.threshold_tokens
            self._apply_selection(decodes, selection)
        elif not self._move_decodes_first():
            original_running = []
        config.long_prefill_token_threshold = (
            min(threshold, saved_threshold) if saved_threshold > 0 else threshold
        )
        # The adaptive floor would lift the threshold above the cap.
        self.adaptive_long_prefill_threshold = False
        try:
            return super().schedule(*args, **kwargs)
        finally:
            self.max_num_scheduled_tokens = saved_budget
            config.long_prefill_token_threshold = saved_threshold
            self.adaptive_long_prefill_threshold = saved_adaptive
            held_running = selection.held_running if selection else []
            if original_running:
                kept, admitted = restore_order(original_running, self.running, held_running)
                self.running[:] = kept + admitted
            if selection is not None:
                self._restore_waiting(original_waiting, selection.held_waiting)

    def _prefill_candidates(self, now_unix_s: float) -> list[Candidate]:
        """The prefills a capped step could serve, in the order it should."""
        running_prefills = [r for r in self.running if not is_decoding(r)]
        num_free_slots = max(self.max_num_running_reqs - len(self.running), 0)
        waiting = []
        if num_free_slots:
            for request in self.waiting:
                if request.status in _SCHEDULABLE:
                    waiting.append(request)
                    if len(waiting) == num_free_slots:
                        break
        first = {
            request_id
            for request_id, num_held in self._num_held_steps.items()
            if num_held >= MAX_HELD_STEPS
        }
        srpf = self.dlfp_config.prefill_order == PrefillOrder.SRPF
        if srpf and now_unix_s:
            first |= self._urgent_ids([*running_prefills, *waiting], now_unix_s)
        return candidates_in_order(
            running_prefills,
            waiting,
            srpf=srpf,
            by_priority=self.policy.value == "priority",
            starving_ids=frozenset(first),
        )

    def _urgent_ids(self, requests: Sequence[Request], now_unix_s: float) -> set[str]:
        """Prefills whose TTFT slack is below their predicted remaining prefill time.

        Slack: arrival at the engine + ``ttft_slo_ms`` - now. The gateway's queue
        before the engine is admission's business.
        """
        rates = self.dlfp_controller.prefill_rates()
        if rates is None:
            return set()
        per_token_s, per_context_s = rates
        ttft_slo_s = self.dlfp_config.ttft_slo_ms / 1000.0
        urgent = set()
        for request in requests:
            slack_s = request.arrival_time + ttft_slo_s - now_unix_s
            computed = request.num_computed_tokens
            remaining = request.num_tokens - computed
            needed_s = remaining * (per_token_s + per_context_s * (computed + remaining / 2))
            if slack_s < needed_s:
                urgent.add(request.request_id)
        return urgent

    def _is_ttft_overdue(self, candidates: Sequence[Candidate], now_unix_s: float) -> bool:
        """Whether a prefill the step could serve is past arrival + ``ttft_slo_ms``."""
        ttft_slo_s = self.dlfp_config.ttft_slo_ms / 1000.0
        return any(c.request.arrival_time + ttft_slo_s < now_unix_s for c in candidates)

    def _oldest_token_step(
        self, decodes: Sequence[Request], candidates: Sequence[Candidate]
    ) -> int | None:
        """The step of the oldest last token among the streams that bind this step.

        Every decoding stream binds, except under ``priority`` scheduling, where a
        stream of lower priority than the first prefill (a larger value) does not:
        a higher-priority stream's deadline comes first.
        """
        if candidates and self.policy.value == "priority":
            head_priority = candidates[0].request.priority
            decodes = [r for r in decodes if r.priority <= head_priority]
        steps = [self._token_steps.get(r.request_id) for r in decodes]
        known = [step for step in steps if step is not None]
        return min(known) if known else None

    def _note_token_steps(
        self, output: SchedulerOutput, token_ids: Sequence[str], step_index: int
    ) -> None:
        for request_id in token_ids:
            self._token_steps[request_id] = step_index
        for request_id in output.finished_req_ids:
            self._token_steps.pop(request_id, None)

    def _apply_selection(self, decodes: list[Request], selection: Selection) -> None:
        # NOTE: held requests leave vLLM's queues for this one step only, and
        # _schedule_capped puts them back in their old places. Decodes go first
        # so that no prefill takes their slots (see _move_decodes_first).
        served = {id(r) for r in selection.running} | {id(r) for r in selection.held_running}
        others = [r for r in self.running if not is_decoding(r) and id(r) not in served]
        self.running[:] = [*decodes, *selection.running, *others]
        if selection.held_waiting:
            self.waiting.remove_requests(selection.held_waiting)
        if isinstance(self.waiting, FCFSRequestQueue) and selection.waiting:
            chosen = {id(r) for r in selection.waiting}
            rest = [r for r in self.waiting if id(r) not in chosen]
            self.waiting.clear()
            self.waiting.extend([*selection.waiting, *rest])

    def _restore_waiting(self, original: list[Request], held: list[Request]) -> None:
        if isinstance(self.waiting, FCFSRequestQueue):
            kept, added = restore_order(original, list(self.waiting), held)
            self.waiting.clear()
            # Preempted requests are prepended by vLLM: keep them first.
            self.waiting.extend([*added, *kept])
        else:
            for request in held:
                self.waiting.add_request(request)

    def _step_shape(
        self, output: SchedulerOutput, decodes: list[Request]
    ) -> tuple[StepShape, list[str]]:
        """The step's composition for the cost model (after vLLM's bookkeeping), and
        the requests it gives a token: its decodes and the prefills it completes."""
        decode_ids = {r.request_id for r in decodes}
        token_ids = []
        num_decode = num_prefill = 0
        attention = 0.0
        for request_id, num_tokens in output.num_scheduled_tokens.items():
            if request_id in decode_ids:
                num_decode += num_tokens
                token_ids.append(request_id)
                continue
            request = self.requests.get(request_id)
            # num_computed_tokens already counts this step's tokens.
            start = 0 if request is None else max(request.num_computed_tokens - num_tokens, 0)
            num_prefill += num_tokens
            attention += chunk_attention(start, num_tokens)
            if request is not None and request.num_computed_tokens >= request.num_tokens:
                token_ids.append(request_id)
        shape = StepShape(
            num_decode_tokens=num_decode,
            decode_context_tokens=sum(r.num_computed_tokens - 1 for r in decodes),
            num_prefill_tokens=num_prefill,
            attention_tokens2=attention,
        )
        return shape, token_ids

    def _count_held_steps(self, output: SchedulerOutput) -> None:
        scheduled = output.num_scheduled_tokens
        in_progress = [r for r in self.running if not is_decoding(r) and r.num_computed_tokens]
        self._num_held_steps = {
            r.request_id: self._num_held_steps.get(r.request_id, 0) + 1
            for r in in_progress
            if r.request_id not in scheduled
        }

    def _move_decodes_first(self) -> bool:
        """Stable-partition ``running`` into decodes then prefills, if needed."""
        if not needs_decodes_first(self.running):
            return False
        # NOTE: FCFS preemption pops running[-1]; while reordered that is the
        # newest prefill rather than the newest request. This only happens in
        # the rare >=2-prefills-ahead case, and only under KV-cache pressure.
        self.running[:] = [r for r in self.running if is_decoding(r)] + [
            r for r in self.running if not is_decoding(r)
        ]
        return True

    def _steps_between_tokens(self) -> int:
        """Steps from one step of a decoding request to its next (1 unless noted).

        NOTE: on a batch queue of D, vLLM's synchronous ``Scheduler`` cannot
        schedule a request whose step is still in flight (no output
        placeholders), so each decode sits in every D-th step; the async one
        schedules it in every step.
        """
        if isinstance(self, AsyncScheduler):
            return 1
        return max(int(self.vllm_config.max_concurrent_batches), 1)

    def _warn_if_cap_exceeds_budget(self) -> None:
        """A cap above the step budget less a full batch of decodes is out of reach when
        every slot decodes: ``max_cap_tokens`` should stay within it."""
        decode_slots = self.max_num_running_reqs * (1 + self.num_spec_tokens)
        room = self.max_num_scheduled_tokens - decode_slots
        if self.dlfp_config.max_cap_tokens > room:
            logger.warning(
                "DLFP max_cap_tokens=%d exceeds the step budget %d less %d decode slots; "
                "raise max_num_batched_tokens for the cap to have any effect up there",
                self.dlfp_config.max_cap_tokens,
                self.max_num_scheduled_tokens,
                decode_slots,
            )

    # --- called from the engine-core utility methods (see utilities) ---

    def dlfp_get_state(self) -> dict[str, Any]:
        """Controller state plus the settings in force, as plain types."""
        state: dict[str, Any] = {
            **self.dlfp_controller.state.to_dict(),
            "config": self.dlfp_config.model_dump(mode="json"),
            "scheduler_cls": type(self).__name__,
            "async_scheduling": bool(self.scheduler_config.async_scheduling),
            # vLLM's max_concurrent_batches: > 1 = step_with_batch_queue, the
            # scheduler runs ahead of execution (pipeline stages or async scheduling).
            "batch_queue_size": int(self.vllm_config.max_concurrent_batches),
            "max_num_scheduled_tokens": self.max_num_scheduled_tokens,
        }
        return state | self._observation_in_force()

    def _observation_in_force(self) -> dict[str, Any]:
        # Without a ring no step can have a device time, before the first one completes.
        config = self.dlfp_config
        is_device = config.observation == Observation.DEVICE
        if self._step_ring is None and is_device and config.controller == ControllerMode.DLFP_CT:
            return {"observation_in_force": Observation.COMPLETION.value}
        return {}

    def dlfp_apply_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """Validate a whole ``DLFPConfig`` dict, apply it, return the new state.

        Runs between steps on the engine-core thread, so the next ``schedule()``
        sees it; steps already in flight become stale for the controller.
        """
        new_config = DLFPConfig.model_validate(config)
        self.dlfp_controller.apply_config(new_config)
        self.dlfp_config = new_config
        self._warn_if_cap_exceeds_budget()
        logger.info("DLFP config applied: %s", new_config)
        return self.dlfp_get_state()

    def dlfp_reset(self, model: bool = False) -> dict[str, Any]:
        """Back to the starting cap and a fresh guard; with ``model``, an empty cost model
        and margin window too."""
        self.dlfp_controller.reset(model=model)
        self._num_held_steps.clear()
        logger.info("DLFP controller reset (model=%s)", model)
        return self.dlfp_get_state()

    def dlfp_attach_step_ring(self, name: str, num_slots: int) -> bool:
        """Read the workers' device times from the gateway's ring ``name`` (``step_ring``)."""
        if self._step_ring is not None:
            self._step_ring.close()
        self._step_ring = StepRing.attach(name, num_slots)
        self._has_warned_no_device_time = False
        logger.info("DLFP device step times from shared memory %s", name)
        return True

    def dlfp_get_steps(self, since_step: int) -> list[dict[str, Any]]:
        """Completed steps with ``step_index >= since_step``, oldest first."""
        return [r.to_dict() for r in self._dlfp_steps if r.step_index >= since_step and r.is_done]


class DLFPScheduler(DLFPSchedulerMixin):
    """DLFP over vLLM's synchronous ``Scheduler`` (CPU, or async scheduling off)."""


class DLFPAsyncScheduler(DLFPSchedulerMixin, AsyncScheduler):  # type: ignore[misc, unused-ignore]
    """DLFP over vLLM's ``AsyncScheduler`` (GPU with async scheduling)."""


install_engine_core_utilities()
