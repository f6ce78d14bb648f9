"""The controller's three events per step, as the scheduler drives them.

``on_schedule`` before ``Scheduler.schedule`` (the cap of the step), ``on_scheduled``
after it (what the step holds; it is dispatched now) and ``on_step_done`` at
``update_from_output`` (the oldest step in flight completed). ``PrefillCapController``
holds the state they read and its settings; this is its per-step half.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine_worker.controller.cost_model import StepCostModel, StepShape
from engine_worker.controller.deadline_plan import Deadline, DeadlinePlan
from engine_worker.controller.modes import ControllerMode, Observation
from engine_worker.controller.params import CapParams
from engine_worker.controller.proportional import ProportionalLaw
from engine_worker.controller.step_timing import StepRecord, StepTimeline
from engine_worker.controller.target_plan import plan_target_cap, resolve_target_s


class StepEvents:
    """The per-step events of ``PrefillCapController`` (see its docstring)."""

    # Set by PrefillCapController.__init__; typed here for the methods below.
    _params: CapParams
    _clock: Callable[[], float]
    _wall_clock: Callable[[], float]
    _timeline: StepTimeline
    _model: StepCostModel
    _law: ProportionalLaw
    _deadline_plan: DeadlinePlan
    _applied_cap_tokens: int | None
    _last_planned: bool
    _target_s: float
    _pending: _Pending | None
    _last_observation_s: float | None
    _num_updates: int
    _last_update_unix_s: float | None
    _num_mixed_steps: int
    _num_decode_free_steps: int
    _num_stale_observations: int
    _observation_in_force: str | None

    def on_schedule(
        self,
        num_decoding: int,
        now_s: float | None = None,
        *,
        candidates: Sequence[tuple[int, int]] = (),
        decode_context_tokens: int = 0,
        oldest_token_step: int | None = None,
        own_deadlines: Sequence[tuple[int, float]] = (),
        ttft_overdue: bool = False,
        head_ttft_left_s: float | None = None,
        ttft_needed_rate: float | None = None,
        ttft_paced_rate: float | None = None,
    ) -> int | None:
        """Before ``schedule()``: the prefill cap for this step, None for no cap, 0 for
        no prefill at all.

        ``candidates`` are the prefills in the order the step would serve them,
        as ``(computed_tokens, remaining_tokens)``; the feed-forward cap plans
        for them. The deadline plan also reads ``oldest_token_step``, the index
        of the step that produced (or will produce) the last token of the stream
        that has waited longest (None: no stream binds the step) among those planned to
        ``itl_slo_ms``, ``own_deadlines``, ``(step index, objective in s)`` of the oldest
        token of the streams with an objective of their own, and
        ``ttft_overdue``, whether a candidate is past its TTFT deadline, and
        ``head_ttft_left_s``, the time left to the first one's where the slack's rate
        would miss it (else None), and ``ttft_needed_rate``, the prefill rate that meets
        every candidate's TTFT deadline, and ``ttft_paced_rate``, the rate that meets each
        less its guard (``DeadlinePlan.plan``; None: not read).
        """
        now_s = self._now(now_s)
        previous = self._timeline.close_interval(now_s)
        if previous is not None and self._params.controller == ControllerMode.DLFP:
            self._observe(previous, previous.interval_s)
        cap, is_planned = None, False
        deadline: Deadline | None = None
        self._target_s = resolve_target_s(
            self._params, self._model, num_decoding, decode_context_tokens
        )
        if num_decoding > 0:
            cap = self._law.cap_tokens
            slack = self._deadline_plan.slack
            if candidates and self._params.plans_deadlines and slack.needs_decode_steps:
                # NOTE: a decode-only step to measure the decodes on (the increment
                # is what a mixed step takes beyond them); only until the fit has some.
                cap, is_planned = 0, True
            elif candidates and self._params.plans_deadlines and slack.is_ready:
                deadline = self._deadline_plan.plan(
                    now_s,
                    num_decoding,
                    decode_context_tokens,
                    candidates,
                    oldest_token_step,
                    ttft_overdue,
                    head_ttft_left_s,
                    own_deadlines,
                    ttft_needed_rate,
                    ttft_paced_rate,
                )
                cap, is_planned = deadline.cap_tokens, True
            elif candidates and self._is_planning and not self._params.plans_deadlines:
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
                deadline = self._deadline_plan.unplanned(now_s, oldest_token_step, own_deadlines)
        self._pending = _Pending(now_s, num_decoding, cap, is_planned, self._target_s, deadline)
        return cap

    def observe_model(self, shape: StepShape, seconds: float) -> None:
        """A step's time into the plan's model: the deadline plan's own (``slack_model``),
        else the windowed fit the others share. Completed steps come here; so may a
        prefit."""
        if self._params.plans_deadlines:
            self._deadline_plan.slack.observe(shape, seconds)
        else:
            self._model.observe(shape, seconds)

    def slack_rate_tokens_per_s(self) -> float | None:
        """Prefill tokens a second at the deadline plan's latest budget (None: not known)."""
        return self._deadline_plan.slack_rate_tokens_per_s if self._params.plans_deadlines else None

    def reads_ttft_rate(self) -> bool:
        """Whether the next step's plan asks for the rate its prompts' TTFT deadlines need
        (``DeadlinePlan.wants_ttft_rate``); the scheduler reads it too where a prompt is
        at risk."""
        return self._params.plans_deadlines and self._deadline_plan.wants_ttft_rate

    def prefill_rates(self) -> tuple[float, float] | None:
        """The cost model's prefill rates (``StepCostModel.prefill_rates``), or None."""
        if self._params.plans_deadlines:
            return self._deadline_plan.slack.prefill_rates()
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
        # NOTE: the latest solve, no refit (hot path): other steps' predictions are
        # telemetry. The deadline plan predicts from its own slack model.
        if self._params.plans_deadlines:
            predicted_s = self._deadline_plan.slack.predict_s(shape)
        else:
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
            is_boost=deadline is not None and deadline.is_boost,
            is_floor=deadline is not None and deadline.is_floor,
            floor_reason=None if deadline is None else deadline.floor_reason,
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
        # NOTE: not a floor step: its few tokens' increment is small beside the decodes'
        # time, then at their slowest, so the fit would read the decode time's error as
        # prefill cost (the prefill rate came out 2.3x the plant's).
        if observed_s is not None and record.shape is not None and not record.is_floor:
            # The model predicts the same quantity the feedback law corrects.
            self.observe_model(record.shape, observed_s)
        elif (
            record.is_floor
            and self._params.plans_deadlines
            and record.num_prefill_tokens
            and record.shape is not None
        ):
            # The margin's ratios age by it all the same, and its size, where the fits
            # predicted it, is one they are trusted for.
            self._deadline_plan.slack.observe_floor(record.shape, observed_s)
        if self._params.controller == ControllerMode.DLFP_CT:
            self._observe(record, observed_s)
        return record

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

    def now_s(self) -> float:
        """The controller's clock: ``time.monotonic`` unless another was injected."""
        return self._clock()

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
