"""A capped step: vLLM's ``schedule()`` with its budget and threshold set to the cap.

The step's token budget is every decode's slots plus the cap, and the per-request
long-prefill threshold stops one prefill from taking the decodes' slots. Under ``srpf``
(or a cap of 0) the prefills the selection holds out leave vLLM's queues for that one
step and go back to their old places after it (``prefill_order``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.request_queue import FCFSRequestQueue
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request

from engine_worker.contract.dlfp_config import PrefillOrder
from engine_worker.engine_core.prefill_order import (
    Candidate,
    Selection,
    restore_order,
    restore_reordered,
    select,
    vllm_order,
)


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


# NOTE: subclasses Scheduler, as DLFPSchedulerMixin does, so that its super() reaches
# the vLLM scheduler next in the MRO. (The ignore is for mypy runs that skip vLLM.)
class CappedStepMixin(Scheduler):  # type: ignore[misc, unused-ignore]
    """Runs one step of vLLM's scheduler under a prefill cap."""

    # vLLM attributes this mixin overwrites per step, typed for mypy runs that skip vLLM.
    max_num_scheduled_tokens: int
    adaptive_long_prefill_threshold: bool

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
        # The waiting queue's order before the step (FCFS; a heap needs none), where the
        # step's selection changes the queue.
        original_waiting: list[Request] | None = None
        # NOTE: a cap of 0 (nothing fits beside the decodes) holds every prefill out
        # of vLLM's queues for the step: vLLM reads a threshold of 0 as "none".
        if self.dlfp_params.prefill_order == PrefillOrder.SRPF or cap_tokens == 0:
            selection = select(candidates, cap_tokens)
            threshold = selection.threshold_tokens
            if cap_tokens and self._is_vllms_own_order(selection):
                selection = None  # vLLM's own order serves the same: nothing to reorder
            else:
                if cap_tokens and not selection.waiting:
                    # NOTE: vLLM serves running before waiting, and the running ones
                    # chosen take the whole cap: the waiting queue is never reached.
                    selection.held_waiting = []
                else:
                    # NOTE: not a copy of a priority queue: iterating one pops a copy of
                    # its heap, a Python comparison at a time (30 µs at 32 waiting).
                    fcfs = isinstance(self.waiting, FCFSRequestQueue)
                    original_waiting = list(self.waiting) if fcfs else []
                self._apply_selection(decodes, selection)
        if selection is None and not self._move_decodes_first():
            original_running = []
        reordered_running = list(self.running) if original_running else []
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
                self.running[:] = restore_reordered(
                    original_running, reordered_running, self.running, held_running
                )
            if selection is not None and original_waiting is not None:
                self._restore_waiting(original_waiting, selection.held_waiting)

    def _is_vllms_own_order(self, selection: Selection) -> bool:
        """Whether vLLM, left to its own order, serves exactly the selection: the chosen
        running prefills lead ``running``'s prefills, and the chosen waiting requests lead
        the waiting queue, after every running prefill. (vLLM serves ``running`` in order,
        then ``waiting`` in order, until the step's budget is spent.)"""
        if selection.waiting and selection.held_running:
            return False
        prefills = (r for r in self.running if r.is_prefill_chunk)
        for chosen, request in zip(selection.running, prefills, strict=False):
            if chosen is not request:
                return False
        if not selection.waiting:
            return True
        order: Iterable[Request] = self.waiting
        heap = getattr(self.waiting, "_heap", None)
        if heap is not None:
            order = vllm_order(heap, len(selection.waiting))
        elif not isinstance(self.waiting, FCFSRequestQueue):
            return False
        for chosen, request in zip(selection.waiting, order, strict=False):
            if chosen is not request:
                return False
        return True

    def _apply_selection(self, decodes: list[Request], selection: Selection) -> None:
        # NOTE: held requests leave vLLM's queues for this one step only, and
        # _schedule_capped puts them back in their old places. Decodes go first
        # so that no prefill takes their slots (see _move_decodes_first).
        served = {id(r) for r in selection.running} | {id(r) for r in selection.held_running}
        others = [r for r in self.running if r.is_prefill_chunk and id(r) not in served]
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
