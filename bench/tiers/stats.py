"""The figures of ``bench tiers``: per-request goodput, each request judged by its own
tier's objectives, overall and per phase; the static arms picked from the calibration;
and the paired comparison of every arm with the baseline and the ceiling.

A request meets its objectives when it was served (not refused, not cut), its first
token came within its TTFT objective, and no more than 1% of its gaps exceeded its ITL
objective (the gateway's ``dlfp_goodput_requests_total`` judges alike). The *baseline*
is the static cap with the best goodput over the whole calibration run (what a user
would tune once); the *ceiling* takes, in each phase, the goodput of that phase's best
calibrated cap (as if a user re-tuned the cap at every change of phase, knowing when).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from bench.lib.compare import paired_ci
from bench.lib.records import RequestRecord
from bench.lib.stats import percentile, request_gaps, ttft_s
from bench.tiers.run import TierRun
from bench.tiers.workload import PHASES, TIERS, TierPlan
from gateway.objectives import Objectives

BASELINE = "baseline"
CEILING = "ceiling"


def is_met(record: RequestRecord, ttft_slo_ms: float, itl_slo_ms: float) -> bool:
    """Served, first token within ``ttft_slo_ms``, at most 1% of gaps over ``itl_slo_ms``:
    the gateway's own rule (``Objectives.met``)."""
    first = ttft_s(record)
    if not record.is_ok or first is None:
        return False
    objectives = Objectives(ttft_slo_ms, itl_slo_ms, ttft_slo_ms, itl_slo_ms, "request")
    gaps = request_gaps(record)
    return objectives.met(first, len(gaps), sum(map(objectives.is_late, gaps)))


def met_vector(run: TierRun, plan: TierPlan) -> list[bool]:
    """Whether each request of the run met its tier's objectives, in request order."""
    out = []
    for record, tier_name in zip(run.requests, run.tiers, strict=True):
        tier = plan.tier(tier_name)
        out.append(is_met(record, tier.ttft_slo_ms, tier.itl_slo_ms))
    return out


def _share(values: Iterable[bool]) -> float | None:
    found = list(values)
    return sum(found) / len(found) if found else None


def goodput(run: TierRun, plan: TierPlan, met: list[bool] | None = None) -> dict[str, Any]:
    """Goodput overall, by phase and by tier (``met``: the run's ``met_vector``, if known);
    refusals and cuts counted."""
    met = met_vector(run, plan) if met is None else met
    return {
        "num_requests": len(met),
        "num_met": sum(met),
        "goodput": _share(met),
        "by_phase": {
            p: _share(m for m, ph in zip(met, run.phases, strict=True) if ph == p) for p in PHASES
        },
        "by_tier": {
            t: _share(m for m, tr in zip(met, run.tiers, strict=True) if tr == t) for t in TIERS
        },
        "num_refused": sum(r.http_status == 429 for r in run.requests),
        "num_cut": sum(r.status == "failed" and r.http_status == 200 for r in run.requests),
    }


def pick_static_arms(calibration: dict[str, TierRun], plan: TierPlan) -> dict[str, Any]:
    """From the calibration's static caps (``fixed-<tokens>``): the best over the whole run
    and each phase's best (ties to the smaller cap, the gentler on the streams)."""
    scored = {arm: goodput(run, plan) for arm, run in calibration.items()}
    caps = sorted(scored, key=lambda arm: int(arm.removeprefix("fixed-")))

    def best(key: Any) -> str:
        return max(caps, key=lambda arm: (key(scored[arm]) or 0.0, -caps.index(arm)))

    whole = best(lambda s: s["goodput"])
    by_phase = {p: best(lambda s, p=p: s["by_phase"][p]) for p in PHASES}
    low, high = (
        min(int(a[6:]) for a in by_phase.values()),
        max(int(a[6:]) for a in by_phase.values()),
    )
    return {
        "whole_run": whole,
        "by_phase": by_phase,
        "phase_caps_ratio": high / low,
        "goodput": {arm: s["goodput"] for arm, s in scored.items()},
        "goodput_by_phase": {arm: s["by_phase"] for arm, s in scored.items()},
    }


def _paired(a: Sequence[bool], b: Sequence[bool]) -> dict[str, float | None]:
    """``mean(a) - mean(b)`` over the same requests, with a 95% interval."""
    diffs = [float(x) - float(y) for x, y in zip(a, b, strict=True)]
    est = paired_ci(diffs)
    if est is None:
        return {"diff": None, "low": None, "high": None}
    return {"diff": est.mean, "low": est.low, "high": est.high}


def _ceiling_vector(
    vectors: dict[str, list[bool]], phases: list[str], picks: dict[str, Any]
) -> list[bool]:
    """Each request judged in the arm of its phase's best calibrated cap."""
    return [vectors[picks["by_phase"][phase]][i] for i, phase in enumerate(phases)]


def tier_gaps(runs: Iterable[TierRun], tier: str) -> list[float]:
    return [
        g
        for run in runs
        for r, t in zip(run.requests, run.tiers, strict=True)
        if t == tier and r.is_ok
        for g in request_gaps(r)
    ]


def summarize_tiers(
    runs: dict[int, dict[str, TierRun]], plan: TierPlan, picks: dict[str, Any]
) -> dict[str, Any]:
    """Goodput per arm and seed; per seed and pooled, every arm against the baseline and
    the ceiling, paired per request; and the window P99 gap of every tier by arm."""
    static_needed = {picks["whole_run"], *picks["by_phase"].values()}
    per_seed: dict[str, Any] = {}
    pooled: dict[str, list[bool]] = {}
    for seed, arms in sorted(runs.items()):
        if not static_needed <= set(arms):
            continue  # the ceiling and baseline need every static arm of the seed
        vectors = {arm: met_vector(run, plan) for arm, run in arms.items()}
        phases = next(iter(arms.values())).phases
        vectors[CEILING] = _ceiling_vector(vectors, phases, picks)
        base = vectors[picks["whole_run"]]
        per_seed[str(seed)] = {
            "goodput": {arm: goodput(run, plan, vectors[arm]) for arm, run in sorted(arms.items())},
            "ceiling": _share(vectors[CEILING]),
            "vs_baseline": {arm: _paired(v, base) for arm, v in sorted(vectors.items())},
        }
        for arm, vector in vectors.items():
            pooled.setdefault(arm, []).extend(vector)
    base = pooled.get(picks["whole_run"], [])
    ceiling = pooled.get(CEILING, [])
    every = [run for arms in runs.values() for run in arms.values()]
    arms_seen = sorted({run.arm for run in every})
    return {
        "picks": picks,
        "per_seed": per_seed,
        "pooled": {
            arm: {
                "goodput": _share(vector),
                "vs_baseline": _paired(vector, base) if base else None,
                "vs_ceiling": _paired(vector, ceiling) if ceiling else None,
                "of_ceiling": _ratio(_share(vector), _share(ceiling)) if arm != CEILING else None,
            }
            for arm, vector in sorted(pooled.items())
        },
        "p99_gap_ms": {
            arm: {
                tier: _ms(percentile(tier_gaps((r for r in every if r.arm == arm), tier), 99))
                for tier in TIERS
            }
            for arm in arms_seen
        },
        "itl_slo_ms": {t.name: t.itl_slo_ms for t in plan.tiers},
        "ttft_slo_ms": {t.name: t.ttft_slo_ms for t in plan.tiers},
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None or math.isnan(seconds) else 1000 * seconds
