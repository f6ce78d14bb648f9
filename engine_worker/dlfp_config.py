"""The runtime-tunable DLFP settings, validated as a whole.

One model travels three ways: from start-up settings into the engine core (via
vLLM's ``additional_config``), from ``/admin/dlfp`` into the running scheduler
(via the engine-core channel), and back out as the settings in force. It is
pure pydantic: no vLLM and no FastAPI import, so both sides can use it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

Device = Literal["cpu", "cuda"]


class ControllerMode(StrEnum):
    """What caps the prefill chunk while at least one request is decoding."""

    OFF = "off"
    """vLLM's own behaviour: no cap."""
    FIXED = "fixed"
    """A constant cap of ``fixed_cap_tokens``."""
    DLFP = "dlfp"
    """The paper's controller: observation = interval between scheduler calls."""
    DLFP_CT = "dlfp-ct"
    """Completion-timed controller: observation = busy time of the completed step."""


class PrefillOrder(StrEnum):
    """Which prefills a capped step serves first."""

    FCFS = "fcfs"
    """vLLM's order: running prefills, then the waiting queue."""
    SRPF = "srpf"
    """Shortest remaining prefill first, waiting or partially prefilled."""


class Observation(StrEnum):
    """What ``dlfp-ct`` feeds back for a completed mixed step."""

    BUSY = "busy"
    """``done(k) - max(done(k-1), dispatched(k))``: the executor's time on step k alone."""
    COMPLETION = "completion"
    """``done(k) - done(k-1)``: what a stream served by consecutive steps waits."""
    MAX = "max"
    """The larger of the two."""


class DLFPConfig(BaseModel):
    """Controller settings and the SLO targets the gateway judges requests by."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)

    controller: ControllerMode = ControllerMode.DLFP_CT
    """Controller mode."""
    target_ms: float = Field(default=300.0, gt=0, le=60_000)
    """Target duration of a mixed (prefill + decode) iteration, in milliseconds."""
    gain: float = Field(default=0.5, gt=0, le=1)
    """Proportional gain; values above 1 oscillate."""
    initial_cap_tokens: int = Field(default=256, ge=1)
    """Cap used before the first observation and after a reset, in tokens."""
    min_cap_tokens: int = Field(default=32, ge=1)
    """Lower bound of the cap, in tokens."""
    max_cap_tokens: int = Field(default=1024, ge=1)
    """Upper bound of the cap, in tokens."""
    step_tokens: int = Field(default=32, ge=1)
    """Quantum of the cap: every cap is a multiple of it."""
    fixed_cap_tokens: int = Field(default=128, ge=1)
    """Cap used by the ``fixed`` controller, in tokens."""
    prefill_order: PrefillOrder = PrefillOrder.SRPF
    """Which prefills a capped step serves first: fcfs (vLLM's order) or srpf."""
    feedforward: bool = True
    """dlfp-ct only: size each mixed step from the online cost model of step time."""
    observation: Observation = Observation.COMPLETION
    """dlfp-ct only: the step time fed back: busy, completion (interval) or max of both."""
    ttft_slo_ms: float = Field(default=30_000.0, gt=0)
    """Time-to-first-token objective the gateway judges requests by."""
    itl_slo_ms: float = Field(default=500.0, gt=0)
    """Inter-token-latency objective the gateway judges requests by."""

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

    @classmethod
    def defaults_for(cls, device: Device) -> DLFPConfig:
        """Per-device defaults (README, "Controller defaults", gives the measurements).

        The class defaults are the CPU ones, for the embedded SmolLM2-135M on two
        cores: a decode step takes about 45 ms and prefill about 0.85 ms a token,
        so a 300 ms mixed step carries about 300 prefill tokens.
        """
        if device == "cuda":
            # The paper's GPU settings (arXiv 2609.38386, section "Evaluation").
            return cls(
                target_ms=80.0,
                initial_cap_tokens=3072,
                min_cap_tokens=1024,
                max_cap_tokens=6144,
                step_tokens=128,
                fixed_cap_tokens=2048,
                ttft_slo_ms=2_000.0,
                itl_slo_ms=100.0,
            )
        return cls()
