"""Every Prometheus metric the gateway exports, under the ``dlfp_`` prefix.

Latencies are measured here, where the client sees them. The metrics live in
a registry of their own (one per app, so tests can build many apps); ``/metrics``
exposes it beside vLLM's own metrics, which vLLM keeps in the default registry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

from engine_worker.contract.dlfp_config import Plan
from gateway.objectives import OBJECTIVE_SOURCES

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

Outcome = Literal["ok", "client_error", "shed", "aborted", "client_stalled", "server_error"]
"""How a request ended, as ``dlfp_requests_total`` counts it: served (``ok``), refused as
invalid (``client_error``) or by admission (``shed``), left by its client (``aborted``)
or cut for not reading (``client_stalled``), or failed (``server_error``)."""
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)
LOOP_LAG_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
REJECTION_REASONS = (
    "concurrency",
    "queue_full",
    "queue_timeout",
    "slo",
    "no_slack",
    "draining",
    "client_share",
    "pre_admission_timeout",
    "tenant_max_queued",
    "tenant_requests_per_minute",
    "tenant_tokens_per_minute",
)
CONTROLLER_PLANS: tuple[str, ...] = (*(str(plan) for plan in Plan), "none")
"""``plan`` label values of ``dlfp_controller_plan``; ``none``: mixed steps are not planned
from the cost model."""
NO_CAP_TOKENS = -1.0
"""``dlfp_controller_cap_tokens`` with no cap in force (0 is a step that carried no prefill)."""


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
    goodput: Counter
    admin_changes: Counter
    active_requests: Gauge
    queued_requests: Gauge
    engine_unfinished: Gauge
    controller_cap: Gauge
    controller_observation: Gauge
    controller_target: Gauge
    controller_plan: Gauge
    controller_margin: Gauge
    controller_zero_prefill_steps: Counter
    controller_floor_steps: Counter
    controller_planned_steps: Counter
    controller_boost_steps: Counter
    controller_knee_steps: Counter
    controller_paced_steps: Counter
    controller_ttft_overdue_steps: Counter
    controller_deadline_steps: Counter
    controller_deadline_misses: Counter
    response_store_entries: Gauge
    response_store_bytes: Gauge
    loop_lag: Histogram

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
    goodput = Counter(
        "dlfp_goodput_requests",
        "Requests that reached the engine and ended, by where their objectives came from "
        "(request, tenant or gateway) and whether they met both (TTFT, and the 0.99 "
        "quantile of their gaps); a client's abort is not counted.",
        ["source", "met"],
        registry=r,
    )
    for source in OBJECTIVE_SOURCES:
        for met in ("true", "false"):
            goodput.labels(source=source, met=met)
    cap = Gauge(
        "dlfp_controller_cap_tokens",
        "Prefill cap of the DLFP controller's latest capped step while requests decode "
        "(-1 = no cap, 0 = a step that carried no prefill because none fitted).",
        registry=r,
    )
    cap.set(NO_CAP_TOKENS)  # until the first poll of the engine says otherwise
    plan = Gauge(
        "dlfp_controller_plan",
        "1 for the plan mixed steps are sized to (deadline, target, or none when they are "
        "not planned from the cost model), 0 for the others.",
        ["plan"],
        registry=r,
    )
    for name in CONTROLLER_PLANS:
        plan.labels(plan=name)
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
        goodput=goodput,
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
        controller_cap=cap,
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
        controller_plan=plan,
        controller_margin=Gauge(
            "dlfp_controller_margin",
            "Deadline plan: the factor on each predicted step time (0 under no deadline plan).",
            registry=r,
        ),
        controller_zero_prefill_steps=Counter(
            "dlfp_controller_zero_prefill_steps",
            "Steps with decodes and waiting prefill that carried no prefill: nothing fitted.",
            registry=r,
        ),
        controller_floor_steps=Counter(
            "dlfp_controller_floor_steps",
            "Deadline plan: steps that carried min_cap_tokens of prefill (paced ones more) "
            "because the ITL objective left no slack beside the decodes' own tail, was lost, "
            "or will leave none at the first prompt's end, or because the slack's rate would "
            "hold a prompt past its TTFT deadline.",
            registry=r,
        ),
        controller_planned_steps=Counter(
            "dlfp_controller_planned_steps",
            "Deadline plan: steps it sized (decodes and prefill waiting): the denominator of "
            "the zero-prefill, floor, paced, boost, knee and TTFT-overdue step counters.",
            registry=r,
        ),
        controller_boost_steps=Counter(
            "dlfp_controller_boost_steps",
            "Deadline plan: steps that went beyond the slack to finish a prefill at risk of "
            "its TTFT deadline, within the overrun allowance.",
            registry=r,
        ),
        controller_knee_steps=Counter(
            "dlfp_controller_knee_steps",
            "Deadline plan: steps whose prefill it cut to the fewest tokens within "
            "step_rate_loss of the slack's rate, so that they end sooner.",
            registry=r,
        ),
        controller_paced_steps=Counter(
            "dlfp_controller_paced_steps",
            "Deadline plan: floor steps (the objective lost or no slack) that carried more "
            "than min_cap_tokens for the rate the prompts' TTFT deadlines need, within twice "
            "the ITL objective.",
            registry=r,
        ),
        controller_ttft_overdue_steps=Counter(
            "dlfp_controller_ttft_overdue_steps",
            "Deadline-planned steps with a prefill past its TTFT deadline "
            "(served at the slack's rate).",
            registry=r,
        ),
        controller_deadline_steps=Counter(
            "dlfp_controller_deadline_steps",
            "Completed steps planned to a stream's deadline.",
            registry=r,
        ),
        controller_deadline_misses=Counter(
            "dlfp_controller_deadline_misses",
            "Completed steps planned to a stream's deadline that ended after it.",
            registry=r,
        ),
        response_store_entries=Gauge(
            "dlfp_response_store_entries",
            "Responses stored for previous_response_id and item_reference, by backend "
            "(redis: the shared store, as of this gateway's last write to it).",
            ["backend"],
            registry=r,
        ),
        response_store_bytes=Gauge(
            "dlfp_response_store_bytes",
            "Bytes of stored responses (JSON, with the conversation before each), by backend.",
            ["backend"],
            registry=r,
        ),
        loop_lag=Histogram(
            "dlfp_event_loop_lag_seconds",
            "How much later than asked the event loop woke a task sleeping 20 ms: what every "
            "request waits behind work that holds the loop.",
            buckets=LOOP_LAG_BUCKETS_S,
            registry=r,
        ),
    )
