"""Each tenant's figures over a scenario, from its client records and the change of the
gateway's per-tenant metrics, the weight-ratio aim, and the table ``bench tenants`` prints.

Shares are of the scenario's tenants only: slot-seconds from the change of
``dlfp_tenant_slot_seconds_total``, completion tokens from that of
``dlfp_tenant_completion_tokens_total`` (the clients' usage counts where the gateway does
not export it). Goodput is what completed: requests and completion tokens per second of
the scenario's window. TTFT is the client's (send to first content chunk); the queue wait
and the gateway's own TTFT come from the histograms' change.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from bench.lib.stats import percentile
from bench.tenants import metrics as m
from bench.tenants.base import Outcome, TenantRecord


def _ms(values_s: Sequence[float]) -> dict[str, float | None]:
    def at(q: float) -> float | None:
        value = percentile(values_s, q)
        return None if value is None else round(value * 1000, 1)

    return {"p50": at(50), "p95": at(95)}


def _histogram_ms(before: m.Series, after: m.Series, name: str, tenant: str) -> dict[str, Any]:
    buckets = m.bucket_delta(before, after, name, tenant)
    figures: dict[str, Any] = {}
    for label, q in (("p50", 0.5), ("p95", 0.95)):
        value = m.histogram_quantile(buckets, q)
        figures[label] = None if value is None else round(value * 1000, 1)
    figures["count"] = int(buckets[-1][1]) if buckets else None
    return figures


def client_figures(records: Sequence[TenantRecord], window_s: float) -> dict[str, Any]:
    """One tenant's figures from its own records."""
    ok = [r for r in records if r.is_complete]
    tokens = sum(r.completion_tokens or 0 for r in ok)
    per_s = 1.0 / window_s if window_s > 0 else 0.0
    return {
        "num_sent": len(records),
        "num_ok": len(ok),
        "num_cut": sum(r.outcome == "cut" for r in records),
        "num_errors": sum(r.outcome == "error" for r in records),
        "refused": dict(
            sorted(Counter(r.refusal for r in records if r.outcome == "refused").items())
        ),
        "completion_tokens": tokens,
        "requests_per_s": round(len(ok) * per_s, 3),
        "tokens_per_s": round(tokens * per_s, 2),
        "ttft_ms": _ms([r.ttft_s for r in ok if r.ttft_s is not None]),
    }


def tenant_reports(
    outcome: Outcome, weights: Mapping[str, float] | None = None
) -> list[dict[str, Any]]:
    """Each of the outcome's tenants' figures, in its order."""
    before = m.parse_series(outcome.before or "")
    after = m.parse_series(outcome.after or "")
    has_metrics = outcome.before is not None and outcome.after is not None
    tenants = outcome.tenants
    slot_s = m.delta_by_tenant(before, after, m.SLOT_SECONDS)
    tokens = m.delta_by_tenant(before, after, m.COMPLETION_TOKENS)
    own = {
        t: client_figures([r for r in outcome.records if r.tenant == t], outcome.window_s)
        for t in tenants
    }
    token_source = "metric" if has_metrics and tokens else "client"
    if token_source == "client":
        tokens = {t: float(own[t]["completion_tokens"]) for t in tenants}
    slot_share = m.shares(slot_s, tenants) if slot_s else dict.fromkeys(tenants)
    token_share = m.shares(tokens, tenants)
    outcomes = {
        label: m.delta_by_tenant(before, after, m.REQUESTS, outcome=label)
        for label in sorted(m.label_values(after, m.REQUESTS, "outcome"))
    }
    reports = []
    for t in tenants:
        report: dict[str, Any] = {"tenant": t}
        if weights is not None and t in weights:
            report["weight"] = weights[t]
        report |= own[t]
        report |= {
            "slot_seconds": _round(slot_s.get(t)),
            "slot_share": _round(slot_share[t], 4),
            "token_share": _round(token_share[t], 4),
            "token_share_from": token_source,
            "queue_wait_ms": _histogram_ms(before, after, m.QUEUE_WAIT, t),
            "server_ttft_ms": _histogram_ms(before, after, m.TTFT, t),
            "outcomes": {label: int(delta.get(t, 0.0)) for label, delta in outcomes.items()},
        }
        reports.append(report)
    return reports


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def weight_ratios(
    slot_s: Mapping[str, float | None], weights: Mapping[str, float], tolerance: float
) -> tuple[dict[str, float | None], bool | None]:
    """Each tenant's slot-seconds over the lowest-weighted tenant's, and whether every one
    lies within ``tolerance`` (relative) of the ratio of their weights; None (not
    measured) without slot-seconds."""
    reference = min(weights, key=lambda t: weights[t])
    base = slot_s.get(reference)
    ratios: dict[str, float | None] = {}
    met: bool | None = True
    for tenant, weight in weights.items():
        if tenant == reference:
            continue
        value = slot_s.get(tenant)
        if value is None or not base:
            ratios[tenant], met = None, None
            continue
        ratio = value / base
        ratios[tenant] = round(ratio, 3)
        target = weight / weights[reference]
        if met is not None and abs(ratio / target - 1.0) > tolerance:
            met = False
    return ratios, met


def verdict_word(met: bool | None) -> str:
    return "not measured" if met is None else "met" if met else "missed"


def _pair(figures: Mapping[str, Any]) -> str:
    p50, p95 = figures.get("p50"), figures.get("p95")
    if p50 is None and p95 is None:
        return "-"
    return f"{'-' if p50 is None else f'{p50:.0f}'}/{'-' if p95 is None else f'{p95:.0f}'}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def format_outcome(outcome: Outcome) -> str:
    """The scenario's aim line and one row per tenant (or why it did not run)."""
    if outcome.error is not None:
        return f"== {outcome.scenario} ==\nnot run: {outcome.error}"
    head = (
        f"{'tenant':<14} {'weight':>6} {'sent':>5} {'ok':>5} {'slot-s':>8} {'slot %':>7} "
        f"{'tok %':>7} {'req/s':>6} {'tok/s':>7} {'TTFT ms p50/p95':>16} "
        f"{'queue ms p50/p95':>17}  refused"
    )
    lines = [
        f"== {outcome.scenario} ({outcome.window_s:.0f} s) ==",
        f"aim: {outcome.aim}: {verdict_word(outcome.met).upper()}"
        + (f" ({outcome.verdict})" if outcome.verdict else ""),
        head,
        "-" * len(head),
    ]
    for r in outcome.reports:
        refused = " ".join(f"{k}:{n}" for k, n in r["refused"].items()) or "-"
        slot_s = "-" if r["slot_seconds"] is None else f"{r['slot_seconds']:.1f}"
        weight = r.get("weight")
        lines.append(
            f"{r['tenant']:<14} {'-' if weight is None else f'{weight:g}':>6} "
            f"{r['num_sent']:>5} {r['num_ok']:>5} {slot_s:>8} {_share(r['slot_share']):>7} "
            f"{_share(r['token_share']):>7} {r['requests_per_s']:>6.2f} {r['tokens_per_s']:>7.1f} "
            f"{_pair(r['ttft_ms']):>16} {_pair(r['queue_wait_ms']):>17}  {refused}"
        )
    return "\n".join(lines)
