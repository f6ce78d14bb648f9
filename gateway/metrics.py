"""Every Prometheus metric the gateway exports, under the ``dlfp_`` prefix.

Latencies are measured here, where the client sees them. The metrics live in
a registry of their own (one per app, so tests can build many apps); ``/metrics``
exposes it beside vLLM's own metrics, which vLLM keeps in the default registry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

# Dense around the CPU and GPU ITL targets: every 10 ms from 10 to 200 ms.
DEFAULT_ITL_BUCKETS_S: tuple[float, ...] = (
    0.005,
    *(round(0.01 * i, 3) for i in range(1, 21)),
    0.25,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    10.0,
)
DEFAULT_TTFT_BUCKETS_S: tuple[float, ...] = (
    0.05,
    0.1,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    7.5,
    10.0,
    15.0,
    20.0,
    30.0,
    45.0,
    60.0,
    90.0,
    120.0,
)
REQUEST_BUCKETS_S: tuple[float, ...] = (
    0.1,
    0.25,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
    20.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)

OUTCOMES = ("ok", "client_error", "shed", "aborted", "client_stalled", "server_error")
REJECTION_REASONS = ("concurrency", "queue_full", "queue_timeout", "slo", "draining")


@dataclass(frozen=True)
class GatewayMetrics:
    registry: CollectorRegistry
    ttft: Histogram
    itl: Histogram
    e2e: Histogram
    queue: Histogram
    requests: Counter
    prompt_tokens: Counter
    generation_tokens: Counter
    admission_rejections: Counter
    admin_changes: Counter
    active_requests: Gauge
    queued_requests: Gauge
    engine_unfinished: Gauge
    controller_cap: Gauge
    controller_observation: Gauge
    controller_target: Gauge

    def exposition(self, include_engine: bool = True) -> bytes:
        """Prometheus text: our metrics, then vLLM's (from the default registry)."""
        text = generate_latest(self.registry)
        return text + generate_latest(REGISTRY) if include_engine else text


def build_metrics(
    itl_buckets_s: Sequence[float] = DEFAULT_ITL_BUCKETS_S,
    ttft_buckets_s: Sequence[float] = DEFAULT_TTFT_BUCKETS_S,
) -> GatewayMetrics:
    r = CollectorRegistry(auto_describe=True)
    requests = Counter(
        "dlfp_requests", "Requests by endpoint and outcome.", ["endpoint", "outcome"], registry=r
    )
    rejections = Counter(
        "dlfp_admission_rejections",
        "Requests turned away by admission control, by reason.",
        ["reason"],
        registry=r,
    )
    for reason in REJECTION_REASONS:
        rejections.labels(reason=reason)
    return GatewayMetrics(
        registry=r,
        ttft=Histogram(
            "dlfp_ttft_seconds",
            "Time from request arrival at the gateway to its first content token out.",
            buckets=ttft_buckets_s,
            registry=r,
        ),
        itl=Histogram(
            "dlfp_itl_seconds",
            "Gap between consecutive tokens of a stream as sent to the client "
            "(tokens sharing one event count as zero gaps).",
            buckets=itl_buckets_s,
            registry=r,
        ),
        e2e=Histogram(
            "dlfp_e2e_seconds",
            "Time from request arrival to its last token out.",
            buckets=REQUEST_BUCKETS_S,
            registry=r,
        ),
        queue=Histogram(
            "dlfp_queue_seconds",
            "Time from request arrival at the gateway to admission.",
            buckets=REQUEST_BUCKETS_S,
            registry=r,
        ),
        requests=requests,
        prompt_tokens=Counter(
            "dlfp_prompt_tokens", "Prompt tokens of admitted requests.", registry=r
        ),
        generation_tokens=Counter(
            "dlfp_generation_tokens", "Tokens generated and sent to clients.", registry=r
        ),
        admission_rejections=rejections,
        admin_changes=Counter(
            "dlfp_admin_changes", "Accepted runtime settings changes through /admin/*.", registry=r
        ),
        active_requests=Gauge(
            "dlfp_active_requests", "Requests admitted and not yet finished.", registry=r
        ),
        queued_requests=Gauge(
            "dlfp_queued_requests", "Requests waiting for admission.", registry=r
        ),
        engine_unfinished=Gauge(
            "dlfp_engine_unfinished_requests",
            "Requests the engine still holds state for (vLLM's output processor); "
            "above dlfp_active_requests for long, it counts leaked requests.",
            registry=r,
        ),
        controller_cap=Gauge(
            "dlfp_controller_cap_tokens",
            "Prefill cap the DLFP controller applies while requests decode (0 = no cap).",
            registry=r,
        ),
        controller_observation=Gauge(
            "dlfp_controller_observation_seconds",
            "The controller's latest observation of a mixed iteration's duration.",
            registry=r,
        ),
        controller_target=Gauge(
            "dlfp_controller_target_seconds",
            "The controller's target duration for a mixed iteration.",
            registry=r,
        ),
    )
