"""The runtime-tunable DLFP settings, validated as a whole.

One model travels three ways: from start-up settings into the engine core (via
vLLM's ``additional_config``), from ``/admin/dlfp`` into the running scheduler
(via the engine-core channel), and back out as the settings in force. It is
pure pydantic: no vLLM and no FastAPI import, so both sides can use it. Its enums are
the controller's own (``controller.modes``).
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine_worker.controller.modes import ControllerMode, Observation, Plan, PrefillOrder

__all__ = ["ControllerMode", "DLFPConfig", "Device", "Observation", "Plan", "PrefillOrder"]

Device = Literal["cpu", "cuda"]


class DLFPConfig(BaseModel):
    """Controller settings and the SLO targets the gateway judges requests by.

    Every value must be finite (``NaN`` and ``Infinity`` are refused) and at or above
    its floor, stated in its docstring: below the floors a value is never useful and
    some make the gateway refuse every request or the scheduler crawl.
    """

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        use_enum_values=False,
        allow_inf_nan=False,
        use_attribute_docstrings=True,
    )

    controller: ControllerMode = ControllerMode.DLFP_CT
    """Controller mode."""
    target_ms: Annotated[float, Field(ge=1, le=60_000)] | Literal["auto"] = "auto"
    """Target duration of a mixed (prefill + decode) iteration, ms, or ``auto``: the larger
    of 0.6 x itl_slo_ms and 2 x the measured decode-only step; floor 1 ms (the controller
    then holds the cap at its minimum)."""
    gain: float = Field(default=0.5, ge=0.01, le=1)
    """Proportional gain; floor 0.01 (below it the cap barely moves); above 1 oscillates."""
    initial_cap_tokens: int = Field(default=256, ge=1)
    """Cap used before the first observation and after a reset, tokens (at least
    min_cap_tokens); dlfp-ct with feedforward starts from min_cap_tokens instead, until its
    cost model plans."""
    min_cap_tokens: int = Field(default=8, ge=8)
    """Lower bound of the cap, tokens; floor 8 (a smaller chunk makes a long prompt's
    prefill crawl; 8 tokens took about 58 ms on a CPU without AVX-512)."""
    max_cap_tokens: int = Field(default=1024, ge=1)
    """Upper bound of the cap, tokens (at least min_cap_tokens)."""
    step_tokens: int = Field(default=8, ge=8)
    """Quantum of the cap: every cap is a multiple of it; floor 8. One quantum should cost
    well under 15% of the target."""
    fixed_cap_tokens: int = Field(default=128, ge=1)
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
    margin_quantile: float = Field(default=0.99, ge=0.5, le=1)
    """dlfp-ct deadline plan only: the quantile of observed/predicted step time, over the
    last 128 mixed steps, that multiplies each prediction; floor 0.5."""
    ttft_slo_ms: float = Field(default=30_000.0, ge=100)
    """Time-to-first-token objective, ms: the gateway judges requests by it, and dlfp-ct's
    deadline plan gives a prefill past arrival + ttft_slo_ms at least min_cap_tokens (and,
    under srpf, serves first a prefill whose slack is below its predicted prefill time);
    floor 100 ms (below it the SLO check would turn every request away)."""
    itl_slo_ms: float = Field(default=500.0, ge=10)
    """Inter-token-latency objective, ms: the gateway judges requests by it, dlfp-ct's
    deadline plan holds every running stream's next token to its last token plus it, and an
    auto target derives from it; floor 10 ms."""

    @model_validator(mode="after")
    def _check_bounds(self) -> Self:
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
        for name in ("initial_cap_tokens", "min_cap_tokens", "max_cap_tokens", "fixed_cap_tokens"):
            value = getattr(self, name)
            if value % self.step_tokens:
                raise ValueError(
                    f"{name}={value} is not a multiple of step_tokens={self.step_tokens}"
                )
        return self
