"""Per-step timing: pairs each ``schedule()`` call with its completion.

vLLM calls ``Scheduler.update_from_output`` exactly once per ``schedule()``
call, in FIFO order, including steps that scheduled 0 tokens (see
``Scheduler.__init__``: "update_from_output is called once per scheduled step
in FIFO order"; ``EngineCore.step`` and ``step_with_batch_queue`` queue every
scheduled step). So a FIFO of in-flight records matches completions to steps
without any id. Two timings come out of it, one per feedback controller:

- ``interval_s``: from this ``schedule()`` call to the next one (the paper's
  signal; under async scheduling it mostly measures an *earlier* step).
- ``busy_s``: ``done(k) - max(done(k-1), dispatched(k))``, the time the
  executor spent on step k alone (the completion-timed signal).
- ``completion_interval_s``: ``done(k) - done(k-L)``, what a stream waits
  between two tokens (host time included). ``L`` is the number of steps
  between two steps of one decoding request: 1, except under vLLM's
  synchronous ``Scheduler`` on a batch queue of ``D`` (pipeline stages), where
  a request whose step is in flight cannot be scheduled again, so it is in
  every ``D``-th step and ``L = D``.

- ``device_s``: the step's time in the worker that executed it
  (``device_timer``), given at completion when the worker wrote it.

``dlfp-ct`` feeds back one of the last three, or the larger of busy and
completion (``observation``).

Pure Python: no vLLM import.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine_worker.controller.cost_model import StepShape
from engine_worker.controller.modes import ControllerMode, Observation


def _to_ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


@dataclass
class StepRecord:
    """One ``schedule()`` call and what became of it (times are monotonic seconds)."""

    step_index: int
    mode: str
    """Controller mode the step was scheduled under."""
    num_decoding: int
    """Requests decoding when the step was scheduled."""
    num_prefill_tokens: int
    num_decode_tokens: int
    cap_tokens: int | None
    """Prefill cap the step was scheduled under (None: uncapped)."""
    cap_generation: int
    """Controller cap generation at scheduling time; a mismatch marks a ``dlfp`` step stale."""
    scheduled_at_s: float
    dispatched_at_s: float
    done_at_s: float | None = None
    done_unix_s: float | None = None
    interval_s: float | None = None
    busy_s: float | None = None
    completion_interval_s: float | None = None
    device_s: float | None = None
    """The step's time in the worker (``device_timer``), or None if it was not written."""
    is_feedback: bool = False
    """Whether this step's observation was fed to the control law."""
    shape: StepShape | None = None
    """The step's composition, as the cost model sees it."""
    predicted_s: float | None = None
    """The cost model's busy time for ``shape`` at dispatch (None before it is ready)."""
    is_planned: bool = False
    """Whether the cap came from the cost model (feed-forward) rather than the feedback cap."""
    target_s: float = 0.0
    """The controller's target when the step was scheduled (``auto`` resolves per step)."""
    observation: Observation = Observation.BUSY
    """What ``dlfp-ct`` feeds back for this step: busy, completion, max or device."""
    cap_exact: float | None = None
    """The unquantised feedback cap in force when the step was scheduled."""
    allowance: float = 1.0
    """The planning allowance in force when the step was scheduled."""
    deadline_s: float | None = None
    """The tightest stream deadline the step was planned to (deadline plan), else None."""
    predicted_end_s: float | None = None
    """When the step was predicted to end (without margin), for the steps after it."""
    margin: float | None = None
    """The margin the step was planned with (deadline plan), else None."""
    margin_correction: float = 1.0
    """The margin's correction in force when the step was scheduled."""
    is_deadline_bound: bool = False
    """Whether the deadline, rather than the cap's bounds or the prefills left, set the cap."""
    is_boost: bool = False
    """Whether the deadline plan went beyond the slack to finish a prefill at TTFT risk."""
    is_floor: bool = False
    """Whether the deadline plan sent ``min_cap_tokens`` (or more, paced to the prompts'
    TTFT deadlines) for want of any slack, now or at the first prompt's end, with the
    objective lost, or beyond the slack's budget (up to ``min_cap_tokens``) for a TTFT
    deadline the slack's rate would miss
    (``Deadline.is_floor``)."""
    floor_reason: str | None = None
    """Which rule sent the floor step (``Deadline.floor_reason``), else None."""

    @property
    def is_mixed(self) -> bool:
        """A step where prefill work shared the iteration with at least one decode."""
        return self.num_decode_tokens > 0 and self.num_prefill_tokens > 0

    @property
    def is_done(self) -> bool:
        return self.done_at_s is not None

    def deadline_slack_ms(self) -> float | None:
        """How long before its deadline the step ended (negative: a miss), ms."""
        if self.deadline_s is None or self.done_at_s is None:
            return None
        return (self.deadline_s - self.done_at_s) * 1000.0

    def observation_s(self) -> float | None:
        """The observation the step's own mode feeds back (None for off/fixed)."""
        if self.mode == ControllerMode.DLFP:
            return self.interval_s
        if self.mode == ControllerMode.DLFP_CT:
            return self.completion_timed_s(self.observation)
        return None

    def completion_timed_s(self, observation: Observation) -> float | None:
        """The completion-timed observation of kind ``observation`` (busy/completion/max/
        device); ``device`` without a device time is ``completion``.

        NOTE: a step scheduled while nothing decoded may follow idle time (the
        engine waited for a request), which its completion interval would count;
        such a step falls back to its busy time. While a request decodes the
        engine loop never waits for input, so the interval holds no idle time.
        """
        if observation == Observation.DEVICE:
            if self.device_s is not None:
                return self.device_s
            observation = Observation.COMPLETION
        completion = self.completion_interval_s if self.num_decoding > 0 else None
        if observation == Observation.BUSY or completion is None:
            return self.busy_s
        if observation == Observation.COMPLETION or self.busy_s is None:
            return completion
        return max(self.busy_s, completion)

    def to_dict(self) -> dict[str, Any]:
        """Telemetry view: plain JSON/msgpack types only."""
        shape = self.shape or StepShape()
        # Mean context a prefill token of this step attends to.
        context = shape.attention_tokens2 / max(shape.num_prefill_tokens, 1)
        return {
            "step_index": self.step_index,
            "mode": self.mode,
            "num_decoding": self.num_decoding,
            "num_prefill_tokens": self.num_prefill_tokens,
            "num_decode_tokens": self.num_decode_tokens,
            "is_mixed": self.is_mixed,
            "cap_tokens": self.cap_tokens,
            "cap_generation": self.cap_generation,
            "observation_ms": _to_ms(self.observation_s()),
            "interval_ms": _to_ms(self.interval_s),
            "busy_ms": _to_ms(self.busy_s),
            "completion_interval_ms": _to_ms(self.completion_interval_s),
            "device_ms": _to_ms(self.device_s),
            "predicted_busy_ms": _to_ms(self.predicted_s),
            "prefill_context_tokens": round(context),
            "decode_context_tokens": shape.decode_context_tokens,
            "is_planned": self.is_planned,
            "target_ms": _to_ms(self.target_s),
            "margin": self.margin,
            "deadline_slack_ms": self.deadline_slack_ms(),
            "is_boost": self.is_boost,
            "is_floor": self.is_floor,
            "floor_reason": self.floor_reason,
            "done_unix_s": self.done_unix_s,
            "is_feedback": self.is_feedback,
        }


def logged_shape(entry: Mapping[str, Any]) -> StepShape:
    """A step's composition read back from its telemetry view (``StepRecord.to_dict``):
    the token-context product is the prefill tokens times the mean context they attend to,
    exact up to that mean's rounding."""
    num_prefill = entry["num_prefill_tokens"]
    return StepShape(
        num_decode_tokens=entry["num_decode_tokens"],
        decode_context_tokens=entry["decode_context_tokens"],
        num_prefill_tokens=num_prefill,
        attention_tokens2=float(num_prefill * entry["prefill_context_tokens"]),
    )


def logged_prefill_start(entry: Mapping[str, Any]) -> int:
    """Where a logged step's prefill began in its prompt, for a step of one chunk: the
    mean context its tokens attend to less half of them (``cost_model.chunk_attention``)."""
    return max(int(entry["prefill_context_tokens"]) - int(entry["num_prefill_tokens"]) // 2, 0)


class StepTimeline:
    """FIFO of in-flight steps; turns schedule/dispatch/done instants into timings."""

    def __init__(self, completion_lag_steps: int = 1) -> None:
        if completion_lag_steps < 1:
            raise ValueError("completion_lag_steps must be >= 1")
        self._in_flight: deque[StepRecord] = deque()
        self._last_scheduled: StepRecord | None = None
        self._last_done_s: float | None = None
        self._done_history: deque[float] = deque(maxlen=completion_lag_steps)
        self._num_steps = 0

    @property
    def num_steps(self) -> int:
        """Steps dispatched so far (also the index of the next step)."""
        return self._num_steps

    @property
    def num_in_flight(self) -> int:
        return len(self._in_flight)

    def close_interval(self, now_s: float) -> StepRecord | None:
        """At a ``schedule()`` entry: end the previous step's scheduler-call interval.

        Returns the step the interval is attributed to (the one scheduled at the
        first of the two calls), or None before the first step.
        """
        previous = self._last_scheduled
        if previous is None or previous.interval_s is not None:
            return None
        previous.interval_s = now_s - previous.scheduled_at_s
        return previous

    def dispatch(self, record: StepRecord) -> None:
        """At a ``schedule()`` return: the step is handed to the executor."""
        if record.step_index != self._num_steps:
            raise ValueError(f"expected step {self._num_steps}, got {record.step_index}")
        self._num_steps += 1
        self._in_flight.append(record)
        self._last_scheduled = record

    def complete(self, now_s: float, now_unix_s: float) -> StepRecord | None:
        """At ``update_from_output`` entry: the oldest in-flight step has finished.

        Returns None if nothing is in flight (a completion without a matching
        ``schedule()``, which vLLM never produces; ignored rather than raised so
        telemetry cannot take the engine down).
        """
        if not self._in_flight:
            return None
        record = self._in_flight.popleft()
        # NOTE: the executor runs steps one after another, so step k cannot
        # start before step k-1 is done nor before it was dispatched.
        started_s = record.dispatched_at_s
        if self._last_done_s is not None:
            started_s = max(started_s, self._last_done_s)
        record.busy_s = max(now_s - started_s, 0.0)
        if len(self._done_history) == self._done_history.maxlen:
            record.completion_interval_s = now_s - self._done_history[0]
        self._done_history.append(now_s)
        record.done_at_s = now_s
        record.done_unix_s = now_unix_s
        self._last_done_s = now_s
        return record
