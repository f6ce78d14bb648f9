"""The controller's interface: its parameters (checked) and a read-only view of its state.

Standard library only, like the rest of ``controller``: ``DLFPConfig`` (pydantic, in
``contract``) is the one place the settings and their defaults are declared, their enums
are ``modes``;
``CapParams.from_config`` copies them, by name, into a plain dataclass the controller runs
on, without importing the model.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Protocol

from engine_worker.controller.modes import ControllerMode, Observation, Plan

AUTO_TARGET_SLO_FRACTION = 0.6
"""An ``auto`` target is at least this share of the ITL objective ..."""
AUTO_TARGET_DECODE_MULTIPLE = 2.0
"""... and at least this multiple of the measured decode-only step (room for prefill)."""
MIN_ALLOWANCE = 0.25
MAX_ALLOWANCE = 2.0
"""Bounds of the feed-forward allowance (a factor on the target the model plans for)."""


class SettingsModel(Protocol):
    """A validated settings model (``contract.dlfp_config.DLFPConfig``), read by field name."""

    def model_dump(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class CapParams:
    """Controller parameters, copied from a ``DLFPConfig`` (which declares, checks and
    defaults them) into a plain dataclass the hot path reads."""

    mode: ControllerMode
    target_ms: float | None
    """None = ``auto``: derived from ``itl_slo_ms`` and the measured decode-only step."""
    gain: float
    initial_cap_tokens: int
    min_cap_tokens: int
    max_cap_tokens: int
    step_tokens: int
    fixed_cap_tokens: int
    feedforward: bool
    """``dlfp-ct`` only: size each mixed step from the online cost model."""
    itl_slo_ms: float
    """The ITL objective an ``auto`` target derives from."""
    observation: Observation
    """``dlfp-ct`` only: the step time fed back."""
    plan: Plan = Plan.DEADLINE
    """``dlfp-ct`` with ``feedforward`` only: what a mixed step is planned to."""
    margin_quantile: float = 0.99
    """Deadline plan: the quantile of observed/predicted step time that is the margin."""
    ttft_slo_ms: float = 30_000.0
    """Deadline plan: a prefill past arrival + this gets at least ``min_cap_tokens``."""

    @classmethod
    def from_config(cls, config: SettingsModel) -> CapParams:
        """The settings as ``DLFPConfig`` checked them: no second check here."""
        values = config.model_dump()
        target_ms = values["target_ms"]
        return cls(
            mode=ControllerMode(values["controller"]),
            target_ms=None if target_ms == "auto" else float(target_ms),
            gain=values["gain"],
            initial_cap_tokens=values["initial_cap_tokens"],
            min_cap_tokens=values["min_cap_tokens"],
            max_cap_tokens=values["max_cap_tokens"],
            step_tokens=values["step_tokens"],
            fixed_cap_tokens=values["fixed_cap_tokens"],
            feedforward=values["feedforward"],
            itl_slo_ms=values["itl_slo_ms"],
            observation=Observation(values["observation"]),
            plan=Plan(values["plan"]),
            margin_quantile=values["margin_quantile"],
            ttft_slo_ms=values["ttft_slo_ms"],
        )

    def clamp(self, tokens: float) -> int:
        """Quantise to ``step_tokens`` (round half up), then clamp to the bounds."""
        quantised = math.floor(tokens / self.step_tokens + 0.5) * self.step_tokens
        return min(max(quantised, self.min_cap_tokens), self.max_cap_tokens)

    def starting_cap(self) -> int | None:
        """The cap a freshly reset controller applies in this mode."""
        if self.mode == ControllerMode.OFF:
            return None
        if self.mode == ControllerMode.FIXED:
            return self.fixed_cap_tokens
        if self.uses_cost_model:
            # NOTE: until its cost model fits and plans, dlfp-ct grows from the floor:
            # started at initial_cap_tokens (256), the first mixed steps after every
            # start or reset ran 521 to 652 ms against a 500 ms objective.
            return self.min_cap_tokens
        return self.initial_cap_tokens

    @property
    def uses_cost_model(self) -> bool:
        return self.feedforward and self.mode == ControllerMode.DLFP_CT

    @property
    def plans_deadlines(self) -> bool:
        return self.uses_cost_model and self.plan == Plan.DEADLINE


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
    """Deadline plan: the factor on each prediction (quantile x correction), or None."""
    margin_correction: float = 1.0
    """Deadline plan: the proportional correction of the margin toward 1% overruns."""
    margin_samples: int = 0
    """Mixed steps in the margin's window (the margin is 1.5 until 16)."""
    num_zero_prefill_steps: int = 0
    """Steps with decodes and waiting prefill that carried no prefill: nothing fitted."""
    num_ttft_overdue_steps: int = 0
    """Steps where nothing fitted but a prefill past its TTFT deadline got min_cap_tokens."""
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
