"""The DLFP prefill-cap controller: seconds in, prefill tokens out.

Pure Python (no vLLM, FastAPI or pydantic import), modelled on simple-pid's
``PID``: a plain class holding its state, output limits that also stop
wind-up, ``reset()``, a read-only view of its state, an injectable clock.
The scheduler drives it with three events per step (``step_events``, its per-step half).
The control laws have modules of their own: ``proportional``, ``target_plan`` and
``deadline_plan``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from engine_worker.controller.cost_model import StepCostModel
from engine_worker.controller.deadline_plan import DeadlinePlan
from engine_worker.controller.modes import ControllerMode, Observation
from engine_worker.controller.params import (
    CapParams,
    ControllerState,
    SettingsModel,
)
from engine_worker.controller.proportional import ProportionalLaw
from engine_worker.controller.step_events import StepEvents
from engine_worker.controller.step_timing import StepTimeline
from engine_worker.controller.target_plan import resolve_target_s

__all__ = [
    "CapParams",
    "ControllerState",
    "PrefillCapController",
]


class PrefillCapController(StepEvents):
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
        self._target_s = resolve_target_s(self._params, self._model, 0, 0)
        self._last_observation_s = None
        self._num_updates = 0
        self._last_update_unix_s = None
        self._num_mixed_steps = 0
        self._num_decode_free_steps = 0
        self._num_stale_observations = 0
        self._pending = None
        self._deadline_plan = DeadlinePlan(params)
        self._observation_in_force = None

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
        plan = self._deadline_plan
        plans_deadlines = self._params.plans_deadlines
        coef = plan.slack.coefficients() if plans_deadlines else self._model.coefficients
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
            cost_model_ready=plan.slack.is_ready if plans_deadlines else self._model.is_ready,
            allowance=self._law.allowance,
            cost_coefficients=None if coef is None else list(coef),
            plan=self._params.plan if self._params.uses_cost_model else None,
            margin=plan.margin_value() if self._params.plans_deadlines else None,
            margin_correction=plan.margin_correction,
            margin_samples=plan.slack.num_margin_samples,
            increment_samples=plan.slack.num_increment_samples,
            num_zero_prefill_steps=plan.num_zero_prefill_steps,
            num_floor_steps=plan.num_floor_steps,
            num_ttft_overdue_steps=plan.num_ttft_overdue_steps,
            num_planned_steps=plan.num_planned_steps,
            num_boost_steps=plan.num_boost_steps,
            num_knee_steps=plan.num_knee_steps,
            num_paced_steps=plan.num_paced_steps,
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
        self._target_s = resolve_target_s(self._params, self._model, 0, 0)
