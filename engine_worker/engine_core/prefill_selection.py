"""The prefills a capped step could serve, in the order it should (``prefill_order``),
and which of them are at risk of, or past, their TTFT deadline."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request, RequestStatus

from engine_worker.contract.api import ITL_SLO_ARG, TTFT_SLO_ARG
from engine_worker.contract.dlfp_config import PrefillOrder
from engine_worker.engine_core.prefill_order import (
    AT_RISK,
    MAX_HELD_STEPS,
    ON_TIME,
    OUT_OF_REACH,
    Candidate,
    needed_rate,
    paced_deadline,
    prefill_candidates,
    srpf_order,
    vllm_order,
)

_SCHEDULABLE = (RequestStatus.WAITING, RequestStatus.PREEMPTED)
"""Waiting statuses vLLM can schedule now (not blocked on a grammar or remote KV)."""

OwnObjectives = tuple[Request, float | None, float | None]
"""A request, and its own TTFT and ITL objectives in ms (None: the controller's)."""


# NOTE: subclasses Scheduler, as DLFPSchedulerMixin does, so that its super() reaches
# the vLLM scheduler next in the MRO. (The ignore is for mypy runs that skip vLLM.)
class PrefillSelectionMixin(Scheduler):  # type: ignore[misc, unused-ignore]
    """Lists a capped step's prefill candidates from vLLM's ``running`` and ``waiting``."""

    _head_deadline_s: float | None = None
    """The TTFT deadline (Unix s) of the latest candidates' first where it is at risk."""
    _earliest_deadline_s: float | None = None
    """The earliest TTFT deadline (Unix s) among the latest candidates (None: not read)."""
    _ttft_needed_rate: float | None = None
    """The prefill rate that meets the latest candidates' TTFT deadlines, earliest first,
    those out of reach left out (``prefill_order.needed_rate``; None: not read)."""
    _ttft_paced_rate: float | None = None
    """The same rate to each deadline less its guard (``prefill_order.paced_deadline``)."""
    _own_objectives: dict[str, OwnObjectives]
    """Each live request's own objectives by id (set by ``DLFPSchedulerMixin``)."""

    def _prefill_candidates(self, now_unix_s: float) -> list[Candidate]:
        """The prefills a capped step could serve, in the order it should; with
        ``now_unix_s`` (deadline planning), their TTFT deadlines (``_ttft_deadlines``) are
        read too, and under ``srpf`` their classes."""
        running = self.running
        num_free_slots = max(self.max_num_running_reqs - len(running), 0)
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
        candidates = prefill_candidates([r for r in running if r.is_prefill_chunk], waiting)
        deadlines: list[float] = []
        classes: dict[str, tuple[int, float]] = {}
        self._ttft_needed_rate = self._ttft_paced_rate = None
        if now_unix_s:
            deadlines, classes = self._ttft_deadlines(candidates, now_unix_s, srpf)
        self._earliest_deadline_s = min(deadlines, default=None)
        self._head_deadline_s = None
        if not srpf:
            return candidates
        first = frozenset(
            request_id
            for request_id, num_held in self._num_held_steps.items()
            if num_held >= MAX_HELD_STEPS
        )
        by_priority = self.policy.value == "priority"
        # NOTE: every candidate's deadline only where one is at risk (it may go ahead only
        # of those with a later one).
        deadline_by_id = (
            {c.request.request_id: d for c, d in zip(candidates, deadlines, strict=True)}
            if any(ttft_class == AT_RISK for ttft_class, _ in classes.values())
            else None
        )
        candidates = srpf_order(candidates, by_priority, first, classes, deadline_by_id)
        if classes and candidates:
            ttft_class, deadline_s = classes.get(candidates[0].request.request_id, (ON_TIME, 0.0))
            self._head_deadline_s = deadline_s if ttft_class == AT_RISK else None
        return candidates

    def _ttft_deadlines(
        self, candidates: Sequence[Candidate], now_unix_s: float, classify: bool
    ) -> tuple[list[float], dict[str, tuple[int, float]]]:
        """Each candidate's TTFT deadline (Unix s), and with ``classify`` its TTFT class
        where it is not ``ON_TIME`` (``prefill_order``), in one pass.

        The deadline is its arrival at the engine plus its own ``ttft_slo_ms``
        (``contract.api.TTFT_SLO_ARG``), else the controller's (the gateway's queue before
        the engine is admission's business). The class is ``OUT_OF_REACH`` where a lone
        prefill at full speed would not finish it by its deadline, ``AT_RISK`` where the
        rate the slack gives would not."""
        rates = self.dlfp_controller.prefill_rates() if classify else None
        per_token_s, per_context_s = rates or (0.0, 0.0)
        slack_rate = self.dlfp_controller.slack_rate_tokens_per_s() if rates else None
        objectives = self._own_objectives
        default_s = self.dlfp_params.ttft_slo_ms / 1000.0
        deadlines: list[float] = []
        classes: dict[str, tuple[int, float]] = {}
        # NOTE: only where the plan asks for it or a prompt is at risk (the rate is read
        # there, ``DeadlinePlan.plan``): a sort a step is not paid where the slack is wide.
        reads_rate = bool(rates) and self.dlfp_controller.reads_ttft_rate()
        reachable: list[tuple[float, float, int]] = []
        for request, computed, remaining, _ in candidates:
            entry = objectives.get(request.request_id)
            if entry is None or entry[0] is not request:
                entry = self._objectives_of(request)
            own_ms = entry[1]
            objective_s = default_s if own_ms is None else own_ms / 1000.0
            deadline_s = request.arrival_time + objective_s
            deadlines.append(deadline_s)
            if rates is None:
                continue
            left_s = deadline_s - now_unix_s
            alone_s = remaining * (per_token_s + per_context_s * (computed + remaining / 2))
            if left_s < alone_s:
                classes[request.request_id] = (OUT_OF_REACH, deadline_s)
                continue
            if slack_rate is not None and left_s * slack_rate < remaining:
                classes[request.request_id] = (AT_RISK, deadline_s)
                reads_rate = True
            reachable.append((deadline_s, objective_s, remaining))
        if reads_rate:
            self._ttft_needed_rate = needed_rate(((d, r) for d, _, r in reachable), now_unix_s)
            self._ttft_paced_rate = needed_rate(
                ((paced_deadline(d, o, now_unix_s), r) for d, o, r in reachable), now_unix_s
            )
        return deadlines, classes

    def _objectives_of(self, request: Request) -> OwnObjectives:
        """The request's own objectives, read from its sampling parameters once.

        NOTE: keyed by id but checked by identity: a request may come with the id of
        one that finished since the entries were last pruned (at the next step)."""
        entry = self._own_objectives.get(request.request_id)
        if entry is None or entry[0] is not request:
            ttft_ms = own_objective_ms(request, TTFT_SLO_ARG)
            entry = (request, ttft_ms, own_objective_ms(request, ITL_SLO_ARG))
            self._own_objectives[request.request_id] = entry
        return entry

    def _head_ttft_left_s(self, candidates: Sequence[Candidate], now_unix_s: float) -> float | None:
        """The time left to the first candidate's TTFT deadline where it is at risk (the
        plan may go beyond the slack for it: ``deadline_plan.DeadlinePlan.plan``)."""
        deadline_s = self._head_deadline_s
        return None if not candidates or deadline_s is None else deadline_s - now_unix_s

    def _is_ttft_overdue(self, candidates: Sequence[Candidate], now_unix_s: float) -> bool:
        """Whether a prefill the step could serve is past its TTFT deadline (the latest
        ``_prefill_candidates`` read them)."""
        earliest_s = self._earliest_deadline_s
        return bool(candidates) and earliest_s is not None and earliest_s < now_unix_s


def own_objective_ms(request: Request, key: str) -> float | None:
    """A request's own objective under ``key`` in its sampling parameters' ``extra_args``."""
    params = request.sampling_params
    args = params.extra_args if params is not None else None
    value = args.get(key) if args else None
    return float(value) if isinstance(value, int | float) else None
