"""A request's objectives: its own (the body's ``ttft_slo_ms`` and ``itl_slo_ms``
extension fields), else its tenant's, else the gateway's (the controller's settings).

Admission judges the request by its TTFT objective; the engine's scheduler plans the
prefill beside its stream to its ITL objective and orders prefills by its TTFT deadline
(the objectives travel in ``SamplingOptions``, only where they are the request's or its
tenant's, so a runtime change of the gateway's settings reaches requests in flight); and
``dlfp_goodput_requests_total`` counts whether it met both, by where they came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from gateway.tenant_limits import TenantLimits

ObjectiveSource = Literal["request", "tenant", "gateway"]
OBJECTIVE_SOURCES: tuple[ObjectiveSource, ...] = get_args(ObjectiveSource)
GAP_QUANTILE = 0.99
"""A stream meets its ITL objective when this quantile of its gaps is within it."""


@dataclass(frozen=True)
class Objectives:
    ttft_slo_ms: float
    itl_slo_ms: float
    own_ttft_slo_ms: float | None
    """The request's or its tenant's; None: the gateway's (read by the engine each step)."""
    own_itl_slo_ms: float | None
    source: ObjectiveSource
    """The most specific place either objective came from."""

    def is_late(self, gap_s: float) -> bool:
        """Whether a gap between two of the stream's tokens is over its ITL objective."""
        return gap_s * 1000.0 > self.itl_slo_ms

    def met(self, ttft_s: float, num_gaps: int, num_late_gaps: int) -> bool:
        """Whether a first token after ``ttft_s`` and ``num_gaps`` gaps, ``num_late_gaps``
        of them late (``is_late``), meet both objectives: the TTFT, and the
        ``GAP_QUANTILE`` of the gaps (no more than 1% of them above it)."""
        if ttft_s * 1000.0 > self.ttft_slo_ms:
            return False
        return num_late_gaps <= int((1.0 - GAP_QUANTILE) * num_gaps)


def resolve(
    ttft_slo_ms: float | None,
    itl_slo_ms: float | None,
    tenant: TenantLimits,
    gateway_ttft_slo_ms: float,
    gateway_itl_slo_ms: float,
) -> Objectives:
    """The request's (``ttft_slo_ms``, ``itl_slo_ms`` from its body), else its tenant's,
    else the gateway's."""
    own_ttft = ttft_slo_ms if ttft_slo_ms is not None else tenant.ttft_slo_ms
    own_itl = itl_slo_ms if itl_slo_ms is not None else tenant.itl_slo_ms
    source: ObjectiveSource = "gateway"
    if ttft_slo_ms is not None or itl_slo_ms is not None:
        source = "request"
    elif own_ttft is not None or own_itl is not None:
        source = "tenant"
    return Objectives(
        ttft_slo_ms=own_ttft if own_ttft is not None else gateway_ttft_slo_ms,
        itl_slo_ms=own_itl if own_itl is not None else gateway_itl_slo_ms,
        own_ttft_slo_ms=own_ttft,
        own_itl_slo_ms=own_itl,
        source=source,
    )
