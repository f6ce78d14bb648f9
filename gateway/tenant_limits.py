"""A tenant's share, limits, default priority and objectives (``tenants`` says who the
tenants are). Plain pydantic, so admission can read it without the registry."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class TenantLimits(BaseModel):
    """A tenant's share, limits, default priority and objectives; None = no limit (or the
    gateway's objective). A PATCH to ``/admin/tenants/{name}`` replaces them until
    restart."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, allow_inf_nan=False, use_attribute_docstrings=True
    )

    weight: float = Field(default=1.0, gt=0, le=1000)
    """Its share of the slots when they are contended, against the other tenants'."""
    max_concurrent: int | None = Field(default=None, ge=1)
    """Most slots it holds at once; its other requests queue."""
    max_queued: int | None = Field(default=None, ge=0)
    """Most of its requests queued at once; past it, 429 ``tenant_max_queued``."""
    requests_per_minute: int | None = Field(default=None, ge=1)
    """Most requests it starts in any minute; past it, 429 ``tenant_requests_per_minute``."""
    tokens_per_minute: int | None = Field(default=None, ge=1)
    """Most prompt plus completion tokens in any minute, charged as they happen; a request
    whose prompt and ``max_tokens`` (or its default) would pass it is refused, 429
    ``tenant_tokens_per_minute``."""
    priority: int = Field(default=0, ge=-1000, le=1000)
    """The priority of its requests that name none (lower is served first within it)."""
    ttft_slo_ms: float | None = Field(default=None, ge=100)
    """Its time-to-first-token objective, ms; None = the gateway's."""
    itl_slo_ms: float | None = Field(default=None, ge=10)
    """Its inter-token-latency objective, ms; None = the gateway's."""
