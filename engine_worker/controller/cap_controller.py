"""The DLFP prefill-cap controller: seconds in, prefill tokens out.

Pure Python (no vLLM, FastAPI or pydantic import), modelled on simple-pid's
``PID``: a plain class holding its state, output limits that also stop
wind-up, ``reset()``, a read-only view of its state, an injectable clock.
The scheduler drives it with three events per step (see ``PrefillCapController``).
The control laws have modules of their own: ``proportional``, ``target_plan`` and
``deadline_plan``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from engine_worker.controller.cost_model import StepCostModel, StepShape
from engine_worker.controller.deadline_plan import Deadline, DeadlinePlan
from engine_worker.controller.modes import ControllerMode, Observation
from engine_worker.controller.params import (
    AUTO_TARGET_DECODE_MULTIPLE,
    AUTO_TARGET_SLO_FRACTION,
    CapParams,
    ControllerState,
    SettingsModel,
)
from engine_worker.controller.proportional import ProportionalLaw
from engine_worker.controller.step_timing import StepRecord, StepTimeline
from engine_worker.controller.target_plan import plan_target_cap

__all__ = [
    "CapParams",
    "ControllerState",
    "PrefillCapController",
]


class PrefillCapController:
    """Caps the prefill chunk while at least one request decodes.

    Three control laws set the cap of a mixed step: the proportional law alone
    (``dlfp``, and ``dlfp-ct`` without ``feedforward``; see ``proportional``), or,
    once the cost model is ready, the target plan (``target_plan``), whose
    allowance the proportional law corrects, or the deadline plan
    (``deadline_plan``), whose margin it corrects.

    Units: ``observed`` and ``target`` in seconds (``target_ms`` / 1000), cap in
    prefill tokens. Sign: an iteration slower than the target shrinks the cap
    (or the allowance), a faster one grows it. Both are clamped after every
    update, so the limits also stop wind-up.

    A guarded cycle: the state in force was applied to a *mixed* step (>=1
    decode token and >0 prefill tokens) and that step's observation has
    arrived. Under ``dlfp`` a step scheduled under an older state
    (``cap_generation`` differs) is stale and ignored; ``dlfp-ct`` credits every
    completed step to the state it was scheduled with (the cap or allowance on its
    record), ignoring only steps from before a reset. Decode-free steps are never
    observed. A
    mixed step whose prefill did not fill its cap (a prompt's last chunk) only
    counts if it was slower than the target.

    Observations: ``dlfp`` uses the interval between consecutive ``schedule()``
    calls, attributed to the step scheduled at the first of them (the paper);
    ``dlfp-ct`` uses what ``observation`` names for the completed step (its
    completion interval, busy time, or device time), which also fits the cost
    model.

    Events, per step, from the scheduler (``now_s`` defaults to ``clock()``):
    ``on_schedule`` before ``Scheduler.schedule``, ``on_scheduled`` after it, and
    ``on_step_done`` at ``update_from_output`` (one per ``schedule()``, FIFO).
    """

    def __init__(
        self,
        params: CapParams,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        completion_lag_steps: int = 1,
    ) -> None:
        self._params = params
        self._clock = clock
        self._wall_clock = wall_clock
        # Steps between two tokens of one stream (see step_timing).
        self._timeline = StepTimeline(completion_lag_steps)
        self._model = StepCostModel()
        self._law = ProportionalLaw(params.starting_cap())
        self._applied_cap_tokens = self._law.cap_tokens
        self._last_planned = False
        self._target_s = self._resolve_target_s(0, 0)
        self._last_observation_s: float | None = None
        self._num_updates = 0
        self._last_update_unix_s: float | None = None
        self._num_mixed_steps = 0
        self._num_decode_free_steps = 0
        self._num_stale_observations = 0
        self._pending: _Pending | None = None
        self._deadline_plan = DeadlinePlan(params, self._model)
        self._observation_in_force: str | None = None

    @classmethod
    def from_config(cls, config: SettingsModel, **clocks: Any) -> PrefillCapController:
        return cls(CapParams.from_config(config), **clocks)

    @property
    def params(self) -> CapParams:
        return self._params

    @property
    def cost_model(self) -> StepCostModel:
        return self._model

    @property
    def state(self) -> ControllerState:
        last_ms = self._last_observation_s
        coef = self._model.coefficients
        plan = self._deadline_plan
        return ControllerState(
            mode=self._params.controller,
            target_ms=self._target_s * 1000.0,
            target_source="set" if self._params.set_target_ms is not None else "auto",
            cap_tokens=self._applied_cap_tokens if self._last_planned else self._law.cap_tokens,
            last_observation_ms=None if last_ms is None else last_ms * 1000.0,
            num_updates=self._num_updates,
            last_update_unix_s=self._last_update_unix_s,
            num_mixed_steps=self._num_mixed_steps,
            num_decode_free_steps=self._num_decode_free_steps,
            num_stale_observations=self._num_stale_observations,
            num_steps=self._timeline.num_steps,
            feedforward=self._params.uses_cost_model,
            cost_model_ready=self._model.is_ready,
            allowance=self._law.allowance,
            cost_coefficients=None if coef is None else list(coef),
            plan=self._params.plan if self._params.uses_cost_model else None,
            margin=plan.margin_value() if self._params.plans_deadlines else None,
            margin_correction=plan.margin_correction,
            margin_samples=plan.margin.num_samples,
            num_zero_prefill_steps=plan.num_zero_prefill_steps,
            num_ttft_overdue_steps=plan.num_ttft_overdue_steps,
            num_deadline_steps=plan.num_deadline_steps,
            num_deadline_misses=plan.num_deadline_misses,
            observation_in_force=self._observation_in_force
            if self._params.controller == ControllerMode.DLFP_CT
            else None,
            host_share_ms=plan.host_s() * 1000.0
            if self._params.observation == Observation.DEVICE
            else None,
        )

    def reset(self, *, model: bool = False) -> None:
        """Back to the starting cap; forget the allowance and the guard.

        The cost model's fit and the margin's window are kept (they describe the
        machine, not the state) unless ``model`` is true. Counters are telemetry
        and keep counting. In-flight steps stay queued (their completions must
        still pair up) but become stale.
        """
        self._law.reset(self._params.starting_cap())
        self._applied_cap_tokens = self._law.cap_tokens
        self._last_planned = False
        if model:
            self._model.reset()
            self._deadline_plan.reset_model()
        self._last_observation_s = None

    def apply_config(self, config: SettingsModel) -> None:
        self.apply_params(CapParams.from_config(config))

    def apply_params(self, params: CapParams) -> None:
        """Switch parameters at runtime (between steps).

        A mode switch or a new ``initial_cap_tokens`` resets: a cap learnt from
        another signal means nothing to the new mode, and a new initial cap is
        an explicit request to restart from it. Otherwise the current cap is
        kept, re-quantised and clamped into the new bounds (and a ``fixed``
        controller takes the new fixed cap); target, gain and feed-forward
        changes apply from the next step.
        """
        old, self._params = self._params, params
        self._deadline_plan.apply_params(params)
        if (
            params.controller != old.controller
            or params.initial_cap_tokens != old.initial_cap_tokens
        ):
            self.reset()
        elif params.controller == ControllerMode.FIXED:
            self._law.set_cap(params.fixed_cap_tokens)
        elif self._law.cap_tokens is not None:
            self._law.set_cap(params.clamp(self._law.cap_tokens))
        self._applied_cap_tokens = self._law.cap_tokens
        self._target_s = self._resolve_target_s(0, 0)

    def on_schedule(
        self,
        num_decoding: int,
        now_s: float | None = None,
        *,
        candidates: Sequence[tuple[int, int]] = (),
        decode_context_tokens: int = 0,
        oldest_token_step: int | None = None,
        ttft_overdue: bool = False,
    ) -> int | None:
        """Before ``schedule()``: the prefill cap for this step, None for no cap, 0 for
        no prefill at all.

        ``candidates`` are the prefills in the order the step would serve them,
        as ``(computed_tokens, remaining_tokens)``; the feed-forward cap plans
        for them. The deadline plan also reads ``oldest_token_step``, the index
        of the step that produced (or will produce) the last token of the stream
        that has waited longest (None: no stream binds the step), and
        ``ttft_overdue``, whether a candidate is past its TTFT deadline.
        """
        now_s = self._now(now_s)
        previous = self._timeline.close_interval(now_s)
        if previous is not None and self._params.controller == ControllerMode.DLFP:
            self._observe(previous, previous.interval_s)
        cap, is_planned = None, False
        deadline: Deadline | None = None
        self._target_s = self._resolve_target_s(num_decoding, decode_context_tokens)
        if num_decoding > 0:
            cap = self._law.cap_tokens
            if candidates and self._is_planning and self._params.plans_deadlines:
                deadline = self._deadline_plan.plan(
                    now_s,
                    num_decoding,
                    decode_context_tokens,
                    candidates,
                    oldest_token_step,
                    ttft_overdue,
                )
                cap, is_planned = deadline.cap_tokens, True
            elif candidates and self._is_planning:
                budget_s = self._law.allowance * self._target_s
                cap = plan_target_cap(
                    self._params,
                    self._model,
                    budget_s,
                    num_decoding,
                    decode_context_tokens,
                    candidates,
                )
                is_planned = True
            if candidates:  # a decode-only step applies no cap worth reporting
                self._applied_cap_tokens, self._last_planned = cap, is_planned
            if deadline is None and self._params.plans_deadlines:
                deadline = self._deadline_plan.unplanned(now_s, oldest_token_step)
        self._pending = _Pending(now_s, num_decoding, cap, is_planned, self._target_s, deadline)
        return cap

    def prefill_rates(self) -> tuple[float, float] | None:
        """The cost model's prefill rates (``StepCostModel.prefill_rates``), or None."""
        return self._model.prefill_rates() if self._is_planning else None

    def on_scheduled(
        self,
        num_prefill_tokens: int,
        num_decode_tokens: int,
        now_s: float | None = None,
        *,
        shape: StepShape | None = None,
    ) -> StepRecord:
        """After ``schedule()``: what the step holds; it is dispatched now."""
        now_s = self._now(now_s)
        pending = self._pending or _Pending(now_s, 0, None, False, self._target_s, None)
        self._pending = None
        if shape is None:
            shape = StepShape(num_decode_tokens, 0, num_prefill_tokens, 0.0)
        # NOTE: the latest solve, no refit (hot path): a planned step's plan has just
        # solved, and other steps' predictions are telemetry.
        predicted_s = self._model.predict_cached_s(shape)
        predicted_end_s = self._deadline_plan.predicted_end_s(now_s, predicted_s)
        deadline = pending.deadline
        record = StepRecord(
            step_index=self._timeline.num_steps,
            mode=self._params.controller,
            num_decoding=pending.num_decoding,
            num_prefill_tokens=num_prefill_tokens,
            num_decode_tokens=num_decode_tokens,
            cap_tokens=pending.cap_tokens,
            cap_generation=self._law.generation,
            scheduled_at_s=pending.start_s,
            dispatched_at_s=now_s,
            shape=shape,
            predicted_s=predicted_s,
            is_planned=pending.is_planned,
            target_s=pending.target_s,
            observation=self._params.observation,
            cap_exact=self._law.cap_exact,
            allowance=self._law.allowance,
            deadline_s=None if deadline is None else deadline.deadline_s,
            predicted_end_s=predicted_end_s,
            margin=None if deadline is None else deadline.margin,
            margin_correction=self._deadline_plan.margin_correction,
            is_deadline_bound=deadline is not None and deadline.is_bound,
        )
        self._num_mixed_steps += record.is_mixed
        self._num_decode_free_steps += pending.num_decoding == 0
        self._timeline.dispatch(record)
        self._deadline_plan.dispatch(record)
        return record

    def on_step_done(
        self, now_s: float | None = None, *, device_s: float | None = None
    ) -> StepRecord | None:
        """At ``update_from_output``: the oldest in-flight step completed, and took
        ``device_s`` where it executed (None: not known)."""
        record = self._timeline.complete(self._now(now_s), self._wall_clock())
        if record is None:
            return None
        record.device_s = device_s
        self._deadline_plan.on_step_done(record)
        observation = self._params.observation
        if observation == Observation.DEVICE and device_s is None:
            observation = Observation.COMPLETION
        self._observation_in_force = observation
        observed_s = record.completion_timed_s(self._params.observation)
        if observed_s is not None and record.shape is not None:
            # The cost model predicts the same quantity the feedback law corrects.
            self._model.observe(record.shape, observed_s)
        if self._params.controller == ControllerMode.DLFP_CT:
            self._observe(record, observed_s)
        return record

    def _resolve_target_s(self, num_decoding: int, decode_context_tokens: int) -> float:
        """The target for a step with these decodes: the set one, or the ``auto`` rule."""
        p = self._params
        if p.set_target_ms is not None:
            return p.set_target_ms / 1000.0
        target_s = AUTO_TARGET_SLO_FRACTION * p.itl_slo_ms / 1000.0
        decode_s = self._model.recent_decode_only_s()
        if decode_s is not None and num_decoding > 0:
            target_s = max(target_s, AUTO_TARGET_DECODE_MULTIPLE * decode_s)
        return target_s

    @property
    def _is_planning(self) -> bool:
        return self._params.uses_cost_model and self._model.is_ready

    def _observe(self, record: StepRecord, observed_s: float | None) -> None:
        # NOTE: the guard. Only a mixed step says how long prefill beside a
        # decode takes, and only a step run under the state in force says what
        # *this* state does; anything else would feed back another state's effect.
        cap_tokens = record.cap_tokens
        if observed_s is None or cap_tokens is None or not record.is_mixed:
            return
        if self._law.is_stale(record, self._params.controller):
            self._num_stale_observations += 1
            return
        if record.margin is not None:
            is_feedback = self._deadline_plan.observe(record, observed_s)
        else:
            is_feedback = self._law.update(self._params, record, cap_tokens, observed_s)
        if is_feedback:
            self._count_update(record, observed_s)

    def _count_update(self, record: StepRecord, observed_s: float) -> None:
        self._last_observation_s = observed_s
        self._num_updates += 1
        self._last_update_unix_s = self._wall_clock()
        record.is_feedback = True

    def _now(self, now_s: float | None) -> float:
        return self._clock() if now_s is None else now_s


@dataclass(frozen=True)
class _Pending:
    """Set by ``on_schedule``, consumed by ``on_scheduled``."""

    start_s: float
    num_decoding: int
    cap_tokens: int | None
    is_planned: bool
    target_s: float
    deadline: Deadline | None
