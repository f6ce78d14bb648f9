"""What each tenant used, as Prometheus series labelled by tenant name (never by key)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gateway.metrics import DEFAULT_TTFT_BUCKETS_S, OUTCOMES, REQUEST_BUCKETS_S


@dataclass(frozen=True)
class TenantMetrics:
    requests: Counter
    prompt_tokens: Counter
    completion_tokens: Counter
    queue_wait: Histogram
    ttft: Histogram
    slots: Gauge
    slot_seconds: Counter

    def register(self, tenants: Iterable[str]) -> None:
        """Every tenant's series from the start, at zero, so a dashboard sees each one."""
        for tenant in tenants:
            for outcome in OUTCOMES:
                self.requests.labels(tenant=tenant, outcome=outcome)
            for metric in (
                self.prompt_tokens,
                self.completion_tokens,
                self.queue_wait,
                self.ttft,
                self.slots,
                self.slot_seconds,
            ):
                metric.labels(tenant=tenant)


def build_tenant_metrics(
    registry: CollectorRegistry, ttft_buckets_s: Sequence[float] = DEFAULT_TTFT_BUCKETS_S
) -> TenantMetrics:
    r = registry
    return TenantMetrics(
        requests=Counter(
            "dlfp_tenant_requests",
            "Requests by tenant and outcome.",
            ["tenant", "outcome"],
            registry=r,
        ),
        prompt_tokens=Counter(
            "dlfp_tenant_prompt_tokens",
            "Prompt tokens of admitted requests.",
            ["tenant"],
            registry=r,
        ),
        completion_tokens=Counter(
            "dlfp_tenant_completion_tokens",
            "Tokens generated and sent to the tenant's clients.",
            ["tenant"],
            registry=r,
        ),
        queue_wait=Histogram(
            "dlfp_tenant_queue_wait_seconds",
            "Time from request arrival to admission.",
            ["tenant"],
            buckets=REQUEST_BUCKETS_S,
            registry=r,
        ),
        ttft=Histogram(
            "dlfp_tenant_ttft_seconds",
            "Time from request arrival to its first content token out.",
            ["tenant"],
            buckets=ttft_buckets_s,
            registry=r,
        ),
        slots=Gauge(
            "dlfp_tenant_slots_in_use", "Stream slots the tenant holds.", ["tenant"], registry=r
        ),
        slot_seconds=Counter(
            "dlfp_tenant_slot_seconds",
            "Slot-seconds the tenant's requests held, added as each releases its slots.",
            ["tenant"],
            registry=r,
        ),
    )
