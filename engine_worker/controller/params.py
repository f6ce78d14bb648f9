"""The controller's parameters, declared once, and a read-only view of its state.

Standard library only, like the rest of ``controller``. ``CapParams`` is the one
declaration of every DLFP setting: its name, type, default, floor and ceiling
(``bounds``), the rules between settings (``check``) and its documentation (the attribute
docstrings). ``contract.dlfp_config.DLFPConfig`` derives the pydantic model that validates
the settings at the edge from it; the controller and the scheduler run on ``CapParams``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, Protocol

from engine_worker.controller.modes import ControllerMode, Observation, Plan, PrefillOrder

AUTO_TARGET_SLO_FRACTION = 0.6
"""An ``auto`` target is at least this share of the ITL objective ..."""
AUTO_TARGET_DECODE_MULTIPLE = 2.0
"""... and at least this multiple of the measured decode-only step (room for prefill)."""
MIN_ALLOWANCE = 0.25
MAX_ALLOWANCE = 2.0
"""Bounds of the feed-forward allowance (a factor on the target the model plans for)."""

BOUNDS_KEY = "bounds"
"""The key of a field's ``metadata`` that holds its ``Bounds``."""
CAP_FIELDS = ("initial_cap_tokens", "min_cap_tokens", "max_cap_tokens", "fixed_cap_tokens")
"""The settings that are caps: multiples of ``step_tokens``."""


@dataclass(frozen=True)
class Bounds:
    """A setting's floor (``ge``) and ceiling (``le``), both inclusive; None = none."""

    ge: float | None = None
    le: float | None = None


def _setting(default: Any, ge: float | None = None, le: float | None = None) -> Any:
    return field(default=default, metadata={BOUNDS_KEY: Bounds(ge, le)})


def bounds_of(name: str) -> Bounds:
    """The bounds ``CapParams`` declares for setting ``name``."""
    (found,) = (f for f in fields(CapParams) if f.name == name)
    bounds: Bounds = found.metadata.get(BOUNDS_KEY, Bounds())
    return bounds


@dataclass(frozen=True, kw_only=True)
class CapParams:
    """Controller settings and the SLO targets the gateway judges requests by.

    Every value must be finite (``NaN`` and ``Infinity`` are refused) and at or above
    its floor, stated in its docstring: below the floors a value is never useful and
    some make the gateway refuse every request or the scheduler crawl.
    """

    controller: ControllerMode = ControllerMode.DLFP_CT
    """Controller mode."""
    target_ms: float | Literal["auto"] = _setting("auto", ge=1, le=60_000)
    """Target duration of a mixed (prefill + decode) iteration, ms, or ``auto``: the larger
    of 0.6 x itl_slo_ms and 2 x the measured decode-only step; floor 1 ms (the controller
    then holds the cap at its minimum)."""
    gain: float = _setting(0.5, ge=0.01, le=1)
    """Proportional gain; floor 0.01 (below it the cap barely moves); above 1 oscillates."""
    initial_cap_tokens: int = _setting(256, ge=1)
    """Cap used before the first observation and after a reset, tokens (at least
    min_cap_tokens); dlfp-ct with feedforward starts from min_cap_tokens instead, until its
    cost model plans."""
    min_cap_tokens: int = _setting(8, ge=8)
    """Lower bound of the cap of fixed, dlfp and the target plan, tokens; floor 8 (a smaller
    chunk makes a long prompt's prefill crawl; 8 tokens took about 58 ms on a CPU without
    AVX-512). The deadline plan has no floor: it prefills what the slack allows."""
    max_cap_tokens: int = _setting(1024, ge=1)
    """Upper bound of the cap, tokens (at least min_cap_tokens)."""
    step_tokens: int = _setting(8, ge=8)
    """Quantum of the cap: every cap is a multiple of it; floor 8. One quantum should cost
    well under 15% of the target."""
    fixed_cap_tokens: int = _setting(128, ge=1)
    """Cap used by the ``fixed`` controller, tokens (within the cap's bounds)."""
    prefill_order: PrefillOrder = PrefillOrder.SRPF
    """Which prefills a capped step serves first: fcfs (vLLM's order) or srpf."""
    feedforward: bool = True
    """dlfp-ct only: size each mixed step from the online cost model of step time."""
    observation: Observation = Observation.COMPLETION
    """dlfp-ct only: the step time fed back: busy, completion (interval), max of both, or
    device (timed in the worker; completion where no device time is available)."""
    plan: Plan = Plan.DEADLINE
    """dlfp-ct with feedforward only: plan each mixed step to the running streams'
    deadlines (deadline) or to allowance x target_ms (target)."""
    margin_quantile: float = _setting(0.99, ge=0.5, le=1)
    """dlfp-ct deadline plan only: the quantile of their gaps the streams' objective holds
    (0.99: at most 1% late). The plan aims at half the late share it allows: the decodes'
    tail and the increment's margin are the ``1 - (1 - q) / 2`` quantile, over the last 128
    steps of each kind, of the decode-only steps' observed/predicted time and of the mixed
    steps' time past it per predicted prefill increment; floor 0.5."""
    delivery_share: float = _setting(0.05, ge=0, le=0.5)
    """dlfp-ct deadline plan only: the share of each step's slack (what the tightest stream
    deadline leaves after the decodes' tail) the plan leaves unplanned, for a token's way
    from the engine to its reader (the engine's output, the gateway, the network), which
    the engine does not time; ceiling 0.5."""
    step_rate_loss: float = _setting(0.02, ge=0, le=0.5)
    """dlfp-ct deadline plan only: the share of the slack's prefill rate a step may give up
    to end sooner. A step that completes no prefill carries the fewest tokens whose rate,
    tokens over the step's predicted time, is at least (1 - step_rate_loss) of the rate of
    the tokens the slack allows, so a prompt that arrives waits for a shorter step in
    flight; under srpf, not while a prefill is at risk of its TTFT deadline. 0 fills every
    step to its slack; ceiling 0.5."""
    ttft_slo_ms: float = _setting(30_000.0, ge=100)
    """Time-to-first-token objective, ms: the gateway judges requests by it, and under srpf
    dlfp-ct's deadline plan serves first a prefill whose slack is below its predicted
    prefill time (one past arrival + ttft_slo_ms goes on at the slack's rate, counted);
    floor 100 ms (below it the SLO check would turn every request away)."""
    itl_slo_ms: float = _setting(500.0, ge=10)
    """Inter-token-latency objective, ms: the gateway judges requests by it, dlfp-ct's
    deadline plan holds every running stream's next token to its last token plus it, and an
    auto target derives from it; floor 10 ms."""

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """The rules between settings (each setting's own bounds are ``bounds_of``)."""
        if not self.min_cap_tokens <= self.initial_cap_tokens <= self.max_cap_tokens:
            raise ValueError(
                "need min_cap_tokens <= initial_cap_tokens <= max_cap_tokens, got "
                f"{self.min_cap_tokens} <= {self.initial_cap_tokens} <= {self.max_cap_tokens}"
            )
        if not self.min_cap_tokens <= self.fixed_cap_tokens <= self.max_cap_tokens:
            raise ValueError(
                "fixed_cap_tokens must lie within [min_cap_tokens, max_cap_tokens], got "
                f"{self.fixed_cap_tokens} outside [{self.min_cap_tokens}, {self.max_cap_tokens}]"
            )
        for name in CAP_FIELDS:
            value = getattr(self, name)
            if value % self.step_tokens:
                raise ValueError(
                    f"{name}={value} is not a multiple of step_tokens={self.step_tokens}"
                )

    @classmethod
    def from_config(cls, config: SettingsModel) -> CapParams:
        """The settings as the model at the edge checked them, by field name."""
        return cls(**config.model_dump())

    @property
    def set_target_ms(self) -> float | None:
        """The target an operator set, ms; None = ``auto`` (derived from ``itl_slo_ms``
        and the measured decode-only step)."""
        return None if self.target_ms == "auto" else float(self.target_ms)

    def clamp(self, tokens: float) -> int:
        """Quantise to ``step_tokens`` (round half up), then clamp to the bounds."""
        quantised = math.floor(tokens / self.step_tokens + 0.5) * self.step_tokens
        return min(max(quantised, self.min_cap_tokens), self.max_cap_tokens)

    def starting_cap(self) -> int | None:
        """The cap a freshly reset controller applies in this mode."""
        if self.controller == ControllerMode.OFF:
            return None
        if self.controller == ControllerMode.FIXED:
            return self.fixed_cap_tokens
        if self.uses_cost_model:
            # NOTE: until its cost model fits and plans, dlfp-ct grows from the floor:
            # started at initial_cap_tokens (256), the first mixed steps after every
            # start or reset ran 521 to 652 ms against a 500 ms objective.
            return self.min_cap_tokens
        return self.initial_cap_tokens

    @property
    def uses_cost_model(self) -> bool:
        return self.feedforward and self.controller == ControllerMode.DLFP_CT

    @property
    def plans_deadlines(self) -> bool:
        return self.uses_cost_model and self.plan == Plan.DEADLINE


class SettingsModel(Protocol):
    """A validated settings model (``contract.dlfp_config.DLFPConfig``), read by field name."""

    def model_dump(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ControllerState:
    """Read-only snapshot of the controller, for metrics and ``/admin``."""

    mode: str
    target_ms: float
    """The target in force, ms (resolved at the latest step when ``auto``)."""
    target_source: str
    """``auto`` (derived from the ITL objective and the decode step) or ``set``."""
    cap_tokens: int | None
    """The feedback cap in force, or under feed-forward the cap of the latest capped step;
    None when the mode is ``off``."""
    last_observation_ms: float | None
    """Last observation fed to the control law."""
    num_updates: int
    """Control-law evaluations (guarded cycles), whether or not the cap moved."""
    last_update_unix_s: float | None
    num_mixed_steps: int
    """Steps with >=1 decode token and >0 prefill tokens."""
    num_decode_free_steps: int
    """Steps scheduled with no request decoding (never capped)."""
    num_stale_observations: int
    """Mixed-step observations ignored because the step ran under an older cap."""
    num_steps: int
    feedforward: bool
    """Whether mixed steps are sized from the cost model (``dlfp-ct`` with ``feedforward``)."""
    cost_model_ready: bool
    """Whether the cost model has seen enough steps with prefill to predict."""
    allowance: float
    """Feed-forward correction: the model plans each step for ``allowance * target``."""
    cost_coefficients: list[float] | None
    """The cost model's fit (see ``cost_model``), or None before it is ready."""
    plan: str | None = None
    """``deadline`` or ``target`` while mixed steps are planned from the cost model
    (``dlfp-ct`` with ``feedforward``), else None."""
    margin: float | None = None
    """Deadline plan: the factor on each predicted prefill increment (quantile x
    correction), or None."""
    margin_correction: float = 1.0
    """Deadline plan: the proportional correction of the margin toward half the overruns
    the streams' objective allows (0.5% at ``margin_quantile`` 0.99)."""
    margin_samples: int = 0
    """Mixed steps in the margin's window (the margin is 1.5 until 8). Only a step whose
    prefill increment is at least a quarter of its decode time enters it."""
    increment_samples: int = 0
    """Deadline plan: mixed steps the prefill increment's fit took since start or the
    model's reset (every completed mixed step once the decode time is known, outliers
    aside)."""
    num_zero_prefill_steps: int = 0
    """Steps with decodes and waiting prefill that carried no prefill: nothing fitted."""
    num_floor_steps: int = 0
    """Deadline plan: steps that carried ``min_cap_tokens`` because the streams' objective
    left no slack beside the decodes' own tail, was lost, or will leave none at the first
    prompt's end, or that went beyond the slack's budget because its rate would hold a
    prompt past its TTFT deadline, with only the tokens the deadlines need
    (``Deadline.is_floor``), paced ones (``num_paced_steps``) included."""
    num_ttft_overdue_steps: int = 0
    """Deadline plan: planned steps with a prefill past its TTFT deadline (it goes on at the
    slack's rate)."""
    num_planned_steps: int = 0
    """Deadline plan: steps it sized (decodes and prefill waiting)."""
    num_boost_steps: int = 0
    """Deadline plan: steps that went beyond the slack to finish a prefill at risk of its
    TTFT deadline, within the overrun allowance."""
    num_knee_steps: int = 0
    """Deadline plan: steps whose prefill it cut to the fewest tokens within
    ``step_rate_loss`` of the slack's rate, so that they end sooner."""
    num_paced_steps: int = 0
    """Deadline plan: floor steps, where the streams' objective was lost or left no slack,
    that carried more than ``min_cap_tokens`` for the rate the prompts' TTFT deadlines
    need, within twice the objective."""
    num_deadline_steps: int = 0
    """Completed steps planned to a stream deadline."""
    num_deadline_misses: int = 0
    """Of those, steps that completed after the deadline they were planned to."""
    observation_in_force: str | None = None
    """``dlfp-ct``: what the latest completed step was observed by (``observation``, or
    ``completion`` where a ``device`` step had no device time); None under other modes."""
    host_share_ms: float | None = None
    """``observation: device``: the host-share quantile the deadline plan adds, ms."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


SCHEDULER_STATE_KEYS = ("batch_queue_size", "async_scheduling", "scheduler_cls")
"""What the scheduler adds to the controller's state (``dlfp_get_state``): how the engine
schedules; a batch queue above 1 means the scheduler runs ahead of execution."""
STATE_KEYS = (
    *(f.name for f in fields(ControllerState) if f.name != "mode"),
    *SCHEDULER_STATE_KEYS,
)
"""The live state ``/admin/dlfp`` shows (the mode as ``controller``)."""
