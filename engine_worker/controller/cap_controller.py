"""The DLFP prefill-cap controller: seconds in, prefill tokens out.

Pure Python (no vLLM, FastAPI or pydantic import), modelled on simple-pid's
``PID``: a plain class holding its state, output limits that also stop
wind-up, ``reset()``, a read-only view of its state, an injectable clock.
The scheduler drives it with three events per step (see ``PrefillCapController``).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from engine_worker.controller.cost_model import StepCostModel, StepShape, plan_prefill
from engine_worker.controller.host_share import HostShareWindow
from engine_worker.controller.margin import MarginWindow, corrected
from engine_worker.controller.params import (
    AUTO_TARGET_DECODE_MULTIPLE,
    AUTO_TARGET_SLO_FRACTION,
    MAX_ALLOWANCE,
    MIN_ALLOWANCE,
    CapParams,
    ControllerState,
    SettingsModel,
)
from engine_worker.controller.step_timing import StepRecord, StepTimeline

RECENT_STEPS = 64
"""Steps whose end times the deadline plan can look up (a stream's last token is in one)."""

__all__ = [
    "CapParams",
    "ControllerState",
    "PrefillCapController",
]


class PrefillCapController:
    """Caps the prefill chunk while at least one request decodes.

    Feedback law (modes ``dlfp`` and ``dlfp-ct``), after each guarded cycle::

        cap <- clamp(quantise(cap * (1 + gain * (target - observed) / target)))

    The law runs on an unquantised cap (``cap_exact``, clamped to the bounds)
    and only the applied cap is quantised: quantising the state itself would
    trap the cap wherever one update moves it by less than half a step.

    Feed-forward (``dlfp-ct`` with ``feedforward``, once the cost model is
    ready): each mixed step gets the largest cap whose *predicted* busy time,
    for the prefills it would serve in order, fits ``allowance * target``::

        cap(k) = max{c in [min, max], c = j * step : predict(shape(c)) <= allowance * target}
        allowance <- clamp(allowance * (1 + gain * (target - observed) / target), 0.25, 2)

    so the proportional law corrects the prediction's error instead of
    carrying the whole plant, and a new prompt starts at the cap predicted for
    its context rather than at the cap the last long prompt left.

    Deadline plan (``plan: deadline``, the default of ``dlfp-ct`` with its cost
    model): each mixed step gets the largest cap whose predicted end, with the
    margin ``m`` for the tail (see ``margin``), meets the tightest deadline of
    the running streams, ``end(last token) + itl_slo``::

        base = end of the newest step (predicted while in flight, observed once done)
        cap(k) = max{c : base + m * predict(shape(c)) <= min_i end(token_i) + itl_slo}

    with no prefill at all when not even ``min_cap_tokens`` fits (unless a
    prefill is past its TTFT deadline: then ``min_cap_tokens``), and a step
    that completes prefills ending with them (see ``_plan_deadline``).

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
    model. Under ``device`` the deadline plan works in completion time: it adds
    the host's share (``host_share``) to each predicted device time.

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
        self._cap_tokens = params.starting_cap()
        self._cap_exact: float | None = self._cap_tokens
        self._applied_cap_tokens = self._cap_tokens
        self._last_planned = False
        self._allowance = 1.0
        self._target_s = self._resolve_target_s(0, 0)
        self._cap_generation = 0
        self._reset_generation = 0
        """The cap generation the last reset started; older steps never count."""
        self._last_observation_s: float | None = None
        self._num_updates = 0
        self._last_update_unix_s: float | None = None
        self._num_mixed_steps = 0
        self._num_decode_free_steps = 0
        self._num_stale_observations = 0
        self._pending: _Pending | None = None
        self._margin = MarginWindow(params.margin_quantile)
        self._host_share = HostShareWindow()
        self._observation_in_force: str | None = None
        self._margin_correction = 1.0
        self._recent: deque[StepRecord] = deque(maxlen=RECENT_STEPS)
        self._num_zero_prefill_steps = 0
        self._num_ttft_overdue_steps = 0
        self._num_deadline_steps = 0
        self._num_deadline_misses = 0

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
        return ControllerState(
            mode=self._params.mode,
            target_ms=self._target_s * 1000.0,
            target_source="set" if self._params.target_ms is not None else "auto",
            cap_tokens=self._applied_cap_tokens if self._last_planned else self._cap_tokens,
            last_observation_ms=None if last_ms is None else last_ms * 1000.0,
            num_updates=self._num_updates,
            last_update_unix_s=self._last_update_unix_s,
            num_mixed_steps=self._num_mixed_steps,
            num_decode_free_steps=self._num_decode_free_steps,
            num_stale_observations=self._num_stale_observations,
            num_steps=self._timeline.num_steps,
            feedforward=self._params.uses_cost_model,
            cost_model_ready=self._model.is_ready,
            allowance=self._allowance,
            cost_coefficients=None if coef is None else list(coef),
            plan=self._params.plan if self._params.uses_cost_model else None,
            margin=self._margin_value() if self._params.plans_deadlines else None,
            margin_correction=self._margin_correction,
            margin_samples=self._margin.num_samples,
            num_zero_prefill_steps=self._num_zero_prefill_steps,
            num_ttft_overdue_steps=self._num_ttft_overdue_steps,
            num_deadline_steps=self._num_deadline_steps,
            num_deadline_misses=self._num_deadline_misses,
            observation_in_force=self._observation_in_force
            if self._params.mode == "dlfp-ct"
            else None,
            host_share_ms=self._host_s() * 1000.0 if self._params.observation == "device" else None,
        )

    def reset(self, *, model: bool = False) -> None:
        """Back to the starting cap; forget the allowance and the guard.

        The cost model's fit and the margin's window are kept (they describe the
        machine, not the state) unless ``model`` is true. Counters are telemetry
        and keep counting. In-flight steps stay queued (their completions must
        still pair up) but become stale.
        """
        self._set_cap(self._params.starting_cap(), force_new_generation=True)
        self._reset_generation = self._cap_generation
        self._applied_cap_tokens = self._cap_tokens
        self._last_planned = False
        self._allowance = 1.0
        if model:
            self._model.reset()
            self._margin.reset()
            self._host_share.reset()
            self._margin_correction = 1.0
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
        self._margin.quantile = params.margin_quantile
        if params.mode != old.mode or params.initial_cap_tokens != old.initial_cap_tokens:
            self.reset()
        elif params.mode == "fixed":
            self._set_cap(params.fixed_cap_tokens)
        elif self._cap_tokens is not None:
            self._set_cap(params.clamp(self._cap_tokens))
        self._applied_cap_tokens = self._cap_tokens
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
        if previous is not None and self._params.mode == "dlfp":
            self._observe(previous, previous.interval_s)
        cap, is_planned = None, False
        deadline: _Deadline | None = None
        self._target_s = self._resolve_target_s(num_decoding, decode_context_tokens)
        if num_decoding > 0:
            cap = self._cap_tokens
            if candidates and self._is_planning and self._params.plans_deadlines:
                deadline = self._plan_deadline(
                    now_s, num_decoding, decode_context_tokens, candidates, oldest_token_step
                )
                cap, is_planned = deadline.cap_tokens, True
                if cap == 0 and ttft_overdue:
                    cap = self._params.min_cap_tokens
                    deadline = _Deadline(cap, deadline.deadline_s, deadline.margin, False)
                    self._num_ttft_overdue_steps += 1
                self._num_zero_prefill_steps += cap == 0
            elif candidates and self._is_planning:
                cap, is_planned = self._plan(num_decoding, decode_context_tokens, candidates), True
            if candidates:  # a decode-only step applies no cap worth reporting
                self._applied_cap_tokens, self._last_planned = cap, is_planned
            if deadline is None and self._params.plans_deadlines:
                deadline = _Deadline(None, self._deadline_s(now_s, oldest_token_step), None, False)
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
        base_s = self._base_s(now_s)
        deadline = pending.deadline
        record = StepRecord(
            step_index=self._timeline.num_steps,
            mode=self._params.mode,
            num_decoding=pending.num_decoding,
            num_prefill_tokens=num_prefill_tokens,
            num_decode_tokens=num_decode_tokens,
            cap_tokens=pending.cap_tokens,
            cap_generation=self._cap_generation,
            scheduled_at_s=pending.start_s,
            dispatched_at_s=now_s,
            shape=shape,
            predicted_s=predicted_s,
            is_planned=pending.is_planned,
            target_s=pending.target_s,
            observation=self._params.observation,
            cap_exact=self._cap_exact,
            allowance=self._allowance,
            deadline_s=None if deadline is None else deadline.deadline_s,
            predicted_end_s=base_s + (predicted_s or 0.0) + self._host_s(),
            margin=None if deadline is None else deadline.margin,
            margin_correction=self._margin_correction,
            is_deadline_bound=deadline is not None and deadline.is_bound,
        )
        self._num_mixed_steps += record.is_mixed
        self._num_decode_free_steps += pending.num_decoding == 0
        self._timeline.dispatch(record)
        self._recent.append(record)
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
        completion_s = record.completion_interval_s
        # A step scheduled while nothing decoded may count idle time in its interval.
        if device_s is not None and completion_s is not None and record.num_decoding > 0:
            self._host_share.observe(completion_s, device_s)
        observation = self._params.observation
        if observation == "device" and device_s is None:
            observation = "completion"
        self._observation_in_force = observation
        observed_s = record.completion_timed_s(self._params.observation)
        if observed_s is not None and record.shape is not None:
            # The cost model predicts the same quantity the feedback law corrects.
            self._model.observe(record.shape, observed_s)
        if record.deadline_s is not None and record.done_at_s is not None:
            self._num_deadline_steps += 1
            self._num_deadline_misses += record.done_at_s > record.deadline_s
        if self._params.mode == "dlfp-ct":
            self._observe(record, observed_s)
        return record

    def _resolve_target_s(self, num_decoding: int, decode_context_tokens: int) -> float:
        """The target for a step with these decodes: the set one, or the ``auto`` rule."""
        p = self._params
        if p.target_ms is not None:
            return p.target_ms / 1000.0
        target_s = AUTO_TARGET_SLO_FRACTION * p.itl_slo_ms / 1000.0
        decode_s = self._model.recent_decode_only_s()
        if decode_s is not None and num_decoding > 0:
            target_s = max(target_s, AUTO_TARGET_DECODE_MULTIPLE * decode_s)
        return target_s

    @property
    def _is_planning(self) -> bool:
        return self._params.uses_cost_model and self._model.is_ready

    def _margin_value(self) -> float:
        return self._margin.value() * self._margin_correction

    def _host_s(self) -> float:
        """What the plan adds to a prediction for the host: its share's quantile under
        ``device`` (a prediction of device time), else 0 (the prediction holds it)."""
        return self._host_share.value_s() if self._params.observation == "device" else 0.0

    def _end_s(self, step_index: int) -> float | None:
        """When a recent step ended (observed) or is predicted to end (in flight)."""
        if not self._recent:
            return None
        offset = step_index - self._recent[0].step_index
        if not 0 <= offset < len(self._recent):
            return None
        record = self._recent[offset]
        return record.done_at_s if record.done_at_s is not None else record.predicted_end_s

    def _base_s(self, now_s: float) -> float:
        """When the next step's own time starts counting, for its predicted end.

        A completion-timed prediction counts from the end of the step before
        (predicted while it is in flight); a busy-time one from then or from
        dispatch, whichever is later.
        """
        latest = self._end_s(self._recent[-1].step_index) if self._recent else None
        if latest is None:
            return now_s
        return max(latest, now_s) if self._params.observation == "busy" else latest

    def _deadline_s(self, now_s: float, oldest_token_step: int | None) -> float | None:
        """The tightest stream deadline: its last token's step end + ``itl_slo_ms``."""
        if oldest_token_step is None:
            return None
        token_s = self._end_s(oldest_token_step)
        if token_s is None:  # older than the steps kept: count from now
            token_s = self._base_s(now_s)
        return token_s + self._params.itl_slo_ms / 1000.0

    def _plan_deadline(
        self,
        now_s: float,
        num_decoding: int,
        decode_context_tokens: int,
        candidates: Sequence[tuple[int, int]],
        oldest_token_step: int | None,
    ) -> _Deadline:
        p = self._params
        margin = self._margin_value()
        deadline_s = self._deadline_s(now_s, oldest_token_step)
        budget_s = math.inf
        if deadline_s is not None:
            # NOTE: under device the model predicts device time, and the stream waits
            # for the host's share as well: base + m * predict + host <= deadline.
            budget_s = (deadline_s - self._base_s(now_s) - self._host_s()) / margin

        def fits(cap: int) -> bool:
            num_prefill, attention = plan_prefill(candidates, cap)
            shape = StepShape(num_decoding, decode_context_tokens, num_prefill, attention)
            predicted_s = self._model.predict_s(shape)
            return predicted_s is not None and predicted_s <= budget_s

        if not fits(p.min_cap_tokens):
            return _Deadline(0, deadline_s, margin, True)
        cap = self._largest_fitting_cap(fits)
        left = sum(remaining for _, remaining in candidates)
        is_bound = cap < p.max_cap_tokens and cap < left
        # NOTE: a step that completes prefills ends with them: the first tokens come
        # at the end of the step, so a short prompt is not kept waiting for a step
        # stretched to the deadline with the next prompt's chunk (which waits one
        # step instead). Equation in docs/scheduler.md, "Deadline plan".
        completed = 0
        for _, remaining in candidates:
            if completed + remaining > cap:
                break
            completed += remaining
        if completed:
            cap, is_bound = completed, False
        return _Deadline(cap, deadline_s, margin, is_bound)

    def _largest_fitting_cap(self, fits: Callable[[int], bool]) -> int:
        # NOTE: the prediction never falls as the cap grows (the fit keeps every
        # slope >= 0, and a larger cap serves the same candidates more tokens), so
        # the largest cap that fits is found by bisection over the quantised caps:
        # a few predictions per step on the engine's hot path, not one per quantum.
        p = self._params
        low, high = 0, (p.max_cap_tokens - p.min_cap_tokens) // p.step_tokens
        while low < high:
            middle = (low + high + 1) // 2
            if fits(p.min_cap_tokens + middle * p.step_tokens):
                low = middle
            else:
                high = middle - 1
        return p.min_cap_tokens + low * p.step_tokens

    def _plan(
        self, num_decoding: int, decode_context_tokens: int, candidates: Sequence[tuple[int, int]]
    ) -> int:
        budget_s = self._allowance * self._target_s

        def fits(cap: int) -> bool:
            num_prefill, attention = plan_prefill(candidates, cap)
            shape = StepShape(num_decoding, decode_context_tokens, num_prefill, attention)
            predicted_s = self._model.predict_s(shape)
            return predicted_s is not None and predicted_s <= budget_s

        return self._largest_fitting_cap(fits)

    def _observe(self, record: StepRecord, observed_s: float | None) -> None:
        # NOTE: the guard. Only a mixed step says how long prefill beside a
        # decode takes, and only a step run under the state in force says what
        # *this* state does; anything else would feed back another state's effect.
        if observed_s is None or record.cap_tokens is None or not record.is_mixed:
            return
        p = self._params
        # NOTE: dlfp-ct credits each step to the state it was scheduled with (its cap
        # or allowance, on the record), so a step completed after a newer state was
        # issued still counts: with a batch queue step k+1 is always scheduled before
        # step k completes, and the paper's guard dropped every other observation.
        # Steps from before a reset or another mode never count.
        if p.mode == "dlfp-ct":
            stale = record.cap_generation < self._reset_generation
        else:
            stale = record.cap_generation != self._cap_generation
        if stale or record.mode != p.mode:
            self._num_stale_observations += 1
            return
        if record.margin is not None:
            self._observe_deadline(record, observed_s)
            return
        target_s = record.target_s
        if record.num_prefill_tokens < record.cap_tokens and observed_s <= target_s:
            # The cap did not limit this step (the prompt's last chunk, say): a
            # fast step says nothing about it, while a slow one still does.
            return
        factor = 1.0 + p.gain * (target_s - observed_s) / target_s
        if record.is_planned:
            self._allowance = min(max(record.allowance * factor, MIN_ALLOWANCE), MAX_ALLOWANCE)
            self._cap_generation += 1
        else:
            base = record.cap_exact if record.cap_exact is not None else float(record.cap_tokens)
            exact = min(max(base * factor, p.min_cap_tokens), p.max_cap_tokens)
            self._set_cap(p.clamp(exact), exact=exact)
        self._last_observation_s = observed_s
        self._num_updates += 1
        self._last_update_unix_s = self._wall_clock()
        record.is_feedback = True

    def _observe_deadline(self, record: StepRecord, observed_s: float) -> None:
        """A deadline-planned mixed step: the margin's window and its correction."""
        if record.predicted_s is not None and record.predicted_s > 0:
            self._margin.observe(observed_s / record.predicted_s)
        if record.deadline_s is None or record.done_at_s is None:
            return
        overrun = record.done_at_s > record.deadline_s
        at_floor = record.cap_tokens == self._params.min_cap_tokens
        if not record.is_deadline_bound and (not overrun or at_floor):
            # The deadline did not set the cap (its bounds or the prefills left did):
            # a step within its deadline says nothing about the margin, a late one
            # does, unless it ran at the floor anyway (a TTFT-overdue prefill).
            return
        self._margin_correction = corrected(record.margin_correction, overrun, self._params.gain)
        self._last_observation_s = observed_s
        self._num_updates += 1
        self._last_update_unix_s = self._wall_clock()
        record.is_feedback = True

    def _set_cap(
        self,
        cap_tokens: int | None,
        *,
        exact: float | None = None,
        force_new_generation: bool = False,
    ) -> None:
        # NOTE: a new generation marks every in-flight step stale. An unchanged
        # cap keeps the generation: those steps still measure the cap in force.
        if force_new_generation or cap_tokens != self._cap_tokens:
            self._cap_generation += 1
        self._cap_tokens = cap_tokens
        self._cap_exact = exact if exact is not None else cap_tokens

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
    deadline: _Deadline | None


@dataclass(frozen=True)
class _Deadline:
    """What the deadline plan decided for a step."""

    cap_tokens: int | None
    deadline_s: float | None
    margin: float | None
    is_bound: bool
