"""The paired comparison of two arms over the seeds they share.

For each metric, the per-seed relative change ``(candidate - baseline) / baseline``
is averaged over the seeds, with a 95% confidence interval from the t-distribution
over those per-seed changes (the paper's "paired 95% CI"). Rates and counts
(SLO attainment, failures) are compared by their absolute difference instead.

Output agreement is the share of measured requests whose greedy outputs are
identical between the arms (token ids where both records have them, else text).
A repeated arm (``off`` against ``off-repeat``) measures the run-to-run agreement
that the comparison should be read against.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.lib.records import Trial, load_arm
from bench.lib.report import fmt, format_table
from bench.lib.stats import KINDS, SLO, Summary, summarize

# Two-sided 95%: the 0.975 quantile of Student's t for 1..30 degrees of freedom.
T_975 = (
    12.7062,
    4.3027,
    3.1824,
    2.7764,
    2.5706,
    2.4469,
    2.3646,
    2.3060,
    2.2622,
    2.2281,
    2.2010,
    2.1788,
    2.1604,
    2.1448,
    2.1314,
    2.1199,
    2.1098,
    2.1009,
    2.0930,
    2.0860,
    2.0796,
    2.0739,
    2.0687,
    2.0639,
    2.0595,
    2.0555,
    2.0518,
    2.0484,
    2.0452,
    2.0423,
)
Z_975 = 1.959964

LATENCIES = tuple(f"{m}_p{q}_ms" for m in ("itl", "ttft", "e2e") for q in (50, 90, 99))
BY_KIND = tuple(f"ttft_{kind}_{stat}_ms" for kind in KINDS for stat in ("p50", "p99", "mean"))
"""TTFT by prompt kind (short chat, long agent-like prompts)."""
RELATIVE = (*LATENCIES, *BY_KIND, "output_tps", "request_tps", "goodput_rps")
ABSOLUTE = ("slo_attainment", "num_failed")


def t_quantile_975(df: int) -> float:
    """Student's t 0.975 quantile: the table to 30, a Cornish-Fisher expansion beyond."""
    if df < 1:
        raise ValueError("need at least one degree of freedom")
    if df <= len(T_975):
        return T_975[df - 1]
    z = Z_975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True)
class PairedEstimate:
    mean: float
    low: float | None
    high: float | None
    num_pairs: int


def paired_ci(diffs: Sequence[float]) -> PairedEstimate | None:
    """Mean of the per-seed differences and its two-sided 95% t-interval (None below 2 seeds)."""
    n = len(diffs)
    if n == 0:
        return None
    mean = sum(diffs) / n
    if n < 2:
        return PairedEstimate(mean, None, None, n)
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = t_quantile_975(n - 1) * sd / math.sqrt(n)
    return PairedEstimate(mean, mean - half, mean + half, n)


def compare_metric(
    base: dict[int, Summary], cand: dict[int, Summary], key: str, relative: bool
) -> dict[str, Any]:
    per_seed: dict[str, float] = {}
    for seed in sorted(set(base) & set(cand)):
        b, c = base[seed].get(key), cand[seed].get(key)
        if b is None or c is None or (relative and b == 0):
            continue
        per_seed[str(seed)] = (c - b) / b if relative else c - b
    estimate = paired_ci(list(per_seed.values()))
    return {
        "relative": relative,
        "per_seed": per_seed,
        "estimate": asdict(estimate) if estimate else None,
    }


@dataclass(frozen=True)
class Agreement:
    num_pairs: int
    num_identical: int
    num_by_token_ids: int
    workload_matches: bool
    """Same prompts and same schedule, request by request (the load fingerprint)."""

    @property
    def rate(self) -> float | None:
        return self.num_identical / self.num_pairs if self.num_pairs else None


def output_agreement(a: Trial, b: Trial) -> Agreement:
    by_a, by_b = {r.index: r for r in a.requests}, {r.index: r for r in b.requests}
    same_workload = by_a.keys() == by_b.keys() and all(
        by_a[i].prompt_sha256 == by_b[i].prompt_sha256
        and abs(by_a[i].scheduled_s - by_b[i].scheduled_s) < 1e-6
        for i in by_a
    )
    pairs = [
        (by_a[i], by_b[i])
        for i in sorted(by_a.keys() & by_b.keys())
        if not by_a[i].is_warmup and by_a[i].is_ok and by_b[i].is_ok
    ]
    num_same = num_ids = 0
    for x, y in pairs:
        if x.token_ids is not None and y.token_ids is not None:
            num_ids += 1
            num_same += x.token_ids == y.token_ids
        else:
            num_same += x.text == y.text
    return Agreement(len(pairs), num_same, num_ids, same_workload)


def _agreement(base: dict[int, Trial], other: dict[int, Trial]) -> dict[str, Any]:
    per_seed = {
        seed: output_agreement(base[seed], other[seed])
        for seed in sorted(base.keys() & other.keys())
    }
    num_pairs = sum(a.num_pairs for a in per_seed.values())
    num_same = sum(a.num_identical for a in per_seed.values())
    return {
        "rate": num_same / num_pairs if num_pairs else None,
        "num_pairs": num_pairs,
        "num_identical": num_same,
        "num_by_token_ids": sum(a.num_by_token_ids for a in per_seed.values()),
        "workload_matches": all(a.workload_matches for a in per_seed.values()),
        "per_seed": {str(s): a.rate for s, a in per_seed.items()},
    }


def compare_arms(
    results_dir: Path, baseline: str, candidate: str, slo: SLO, repeat: str | None = None
) -> dict[str, Any]:
    base, cand = load_arm(results_dir, baseline), load_arm(results_dir, candidate)
    seeds = sorted(base.keys() & cand.keys())
    if not seeds:
        raise ValueError(f"arms {baseline!r} and {candidate!r} share no seed")
    base_s = {s: summarize([base[s]], slo) for s in seeds}
    cand_s = {s: summarize([cand[s]], slo) for s in seeds}
    metrics = {k: compare_metric(base_s, cand_s, k, True) for k in RELATIVE}
    metrics |= {k: compare_metric(base_s, cand_s, k, False) for k in ABSOLUTE}
    result: dict[str, Any] = {
        "baseline": baseline,
        "candidate": candidate,
        "seeds": seeds,
        "slo": asdict(slo),
        "metrics": metrics,
        "agreement": _agreement(base, cand),
        "repeat": None,
    }
    if repeat is not None:
        result["repeat"] = {
            "arm": repeat,
            "agreement": _agreement(base, load_arm(results_dir, repeat)),
        }
    return result


def _change(entry: dict[str, Any]) -> list[str]:
    est = entry["estimate"]
    scale, unit = (100.0, "%") if entry["relative"] else (1.0, "")
    per_seed = " ".join(f"{v * scale:+.1f}{unit}" for v in entry["per_seed"].values())
    if est is None:
        return ["-", "-", per_seed]
    ci = (
        "-"
        if est["low"] is None
        else f"[{est['low'] * scale:+.1f}{unit}, {est['high'] * scale:+.1f}{unit}]"
    )
    return [f"{est['mean'] * scale:+.1f}{unit}", ci, per_seed]


def format_comparison(result: dict[str, Any]) -> str:
    rows = [[key, *_change(entry)] for key, entry in result["metrics"].items()]
    table = format_table(("metric", "mean change", "paired 95% CI", "per seed"), rows)
    lines = [f"{result['candidate']} vs {result['baseline']}, seeds {result['seeds']}", table]
    for label, block in (
        ("agreement", result["agreement"]),
        ("run-to-run", (result["repeat"] or {}).get("agreement")),
    ):
        if block is None:
            continue
        name = (
            f" ({result['repeat']['arm']} vs {result['baseline']})" if label == "run-to-run" else ""
        )
        lines.append(
            f"output {label}{name}: {fmt(block['rate'], 100, 1)}% identical of "
            f"{block['num_pairs']} pairs ({block['num_by_token_ids']} by token ids); "
            f"workload {'matches' if block['workload_matches'] else 'DIFFERS'}"
        )
    return "\n".join(lines)
