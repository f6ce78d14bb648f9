"""The prefills a capped step could serve, in the order it should (``prefill_order``),
and which of them are at risk of, or past, their TTFT deadline."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request, RequestStatus

from engine_worker.contract.api import TTFT_SLO_ARG
from engine_worker.contract.dlfp_config import PrefillOrder
from engine_worker.engine_core.capped_step import is_decoding
from engine_worker.engine_core.prefill_order import (
    AT_RISK,
    MAX_HELD_STEPS,
    ON_TIME,
    OUT_OF_REACH,
    Candidate,
    candidates_in_order,
    vllm_order,
)

_SCHEDULABLE = (RequestStatus.WAITING, RequestStatus.PREEMPTED)
"""Waiting statuses vLLM can schedule now (not blocked on a grammar or remote KV)."""


# NOTE: subclasses Scheduler, as DLFPSchedulerMixin does, so that its super() reaches
# the vLLM scheduler next in the MRO. (The ignore is for mypy runs that skip vLLM.)
class PrefillSelectionMixin(Scheduler):  # type: ignore[misc, unused-ignore]
    """Lists a capped step's prefill candidates from vLLM's ``running`` and ``waiting``."""

    _head_deadline_s: float | None = None
    """The TTFT deadline (Unix s) of the latest candidates' first where it is at risk."""

    def _prefill_candidates(self, now_unix_s: float) -> list[Candidate]:
        """The prefills a capped step could serve, in the order it should."""
        running_prefills = [r for r in self.running if not is_decoding(r)]
        num_free_slots = max(self.max_num_running_reqs - len(self.running), 0)
        srpf = self.dlfp_params.prefill_order == PrefillOrder.SRPF
        waiting = []
        queue: Iterable[Request] = self.waiting
        heap = getattr(self.waiting, "_heap", None)
        if num_free_slots and heap:
            # NOTE: under SRPF, with a slot for every waiting request, no order is
            # needed (the candidates are sorted); otherwise vLLM's (see vllm_order).
            queue = heap if srpf and len(heap) <= num_free_slots else vllm_order(heap)
        if num_free_slots:
            for request in queue:
                if request.status in _SCHEDULABLE:
                    waiting.append(request)
                    if len(waiting) == num_free_slots:
                        break
        first = {
            request_id
            for request_id, num_held in self._num_held_steps.items()
            if num_held >= MAX_HELD_STEPS
        }
        classes: dict[str, tuple[int, float]] = {}
        if srpf and now_unix_s:
            classes = self._ttft_classes([*running_prefills, *waiting], now_unix_s)
        candidates = candidates_in_order(
            running_prefills,
            waiting,
            srpf=srpf,
            by_priority=self.policy.value == "priority",
            starving_ids=frozenset(first),
            ttft_classes=classes,
        )
        self._head_deadline_s = None
        if classes and candidates:
            ttft_class, deadline_s = classes.get(candidates[0].request.request_id, (ON_TIME, 0.0))
            self._head_deadline_s = deadline_s if ttft_class == AT_RISK else None
        return candidates

    def _ttft_classes(
        self, requests: Sequence[Request], now_unix_s: float
    ) -> dict[str, tuple[int, float]]:
        """Each prefill's TTFT class where it is not the default (``prefill_order``):
        ``AT_RISK`` with its deadline where the rate the slack gives would not finish it
        by its deadline, ``OUT_OF_REACH`` where no rate would (a lone prefill at full
        speed would not).

        Deadline: arrival at the engine + ``ttft_slo_ms``. The gateway's queue before the
        engine is admission's business.
        """
        rates = self.dlfp_controller.prefill_rates()
        if rates is None:
            return {}
        per_token_s, per_context_s = rates
        slack_rate = self.dlfp_controller.slack_rate_tokens_per_s()
        classes = {}
        for request in requests:
            deadline_s = request.arrival_time + self._ttft_slo_s(request)
            left_s = deadline_s - now_unix_s
            computed = request.num_computed_tokens
            remaining = request.num_tokens - computed
            alone_s = remaining * (per_token_s + per_context_s * (computed + remaining / 2))
            if left_s < alone_s:
                classes[request.request_id] = (OUT_OF_REACH, deadline_s)
            elif slack_rate is not None and left_s * slack_rate < remaining:
                classes[request.request_id] = (AT_RISK, deadline_s)
        return classes

    def _head_ttft_left_s(self, candidates: Sequence[Candidate], now_unix_s: float) -> float | None:
        """The time left to the first candidate's TTFT deadline where it is at risk (the
        plan may go beyond the slack for it: ``deadline_plan.DeadlinePlan.plan``)."""
        deadline_s = self._head_deadline_s
        return None if not candidates or deadline_s is None else deadline_s - now_unix_s

    def _is_ttft_overdue(self, candidates: Sequence[Candidate], now_unix_s: float) -> bool:
        """Whether a prefill the step could serve is past arrival + ``ttft_slo_ms``."""
        return any(
            c.request.arrival_time + self._ttft_slo_s(c.request) < now_unix_s for c in candidates
        )

    def _ttft_slo_s(self, request: Request) -> float:
        """The request's own TTFT objective (``contract.api.TTFT_SLO_ARG``), else the
        controller's ``ttft_slo_ms``; seconds."""
        own_ms = own_objective_ms(request, TTFT_SLO_ARG)
        return (own_ms if own_ms is not None else self.dlfp_params.ttft_slo_ms) / 1000.0


def own_objective_ms(request: Request, key: str) -> float | None:
    """A request's own objective under ``key`` in its sampling parameters' ``extra_args``."""
    params = request.sampling_params
    args = params.extra_args if params is not None else None
    value = args.get(key) if args else None
    return float(value) if isinstance(value, int | float) else None
