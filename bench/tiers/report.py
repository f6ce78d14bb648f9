"""The tables of ``bench tiers`` and its verdict on the aims, from ``summarize_tiers``."""

from __future__ import annotations

from typing import Any

from bench.lib.report import format_table
from bench.tiers.stats import CEILING
from bench.tiers.workload import PHASES, TIERS

AIM_POINTS = 0.10
"""``dlfp-ct``'s goodput at least this much above the baseline's..."""
AIM_OF_CEILING = 0.9
"""...and at least this share of the ceiling's, on every seed."""
CANDIDATE = "dlfp-ct"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _points(entry: dict[str, float | None] | None) -> str:
    if not entry or entry["diff"] is None:
        return "-"
    low, high = entry["low"], entry["high"]
    interval = "" if low is None or high is None else f" [{100 * low:+.0f}, {100 * high:+.0f}]"
    return f"{100 * entry['diff']:+.0f}{interval}"


def verdict(summary: dict[str, Any]) -> list[str]:
    """Each aim, met or missed, per seed."""
    lines = []
    for seed, figures in summary["per_seed"].items():
        good = figures["goodput"].get(CANDIDATE)
        if good is None:
            lines.append(f"seed {seed}: no {CANDIDATE} run")
            continue
        diff = figures["vs_baseline"][CANDIDATE]["diff"]
        ceiling = figures["ceiling"]
        share = good["goodput"] / ceiling if ceiling else None
        lines.append(
            f"seed {seed}: {CANDIDATE} {_pct(good['goodput'])}, "
            f"{100 * diff:+.0f} points on the baseline "
            f"({'met' if diff >= AIM_POINTS else 'MISSED'}, aim +{100 * AIM_POINTS:.0f}); "
            f"{'-' if share is None else f'{share:.2f}'} of the ceiling "
            f"({'met' if share is not None and share >= AIM_OF_CEILING else 'MISSED'}, "
            f"aim {AIM_OF_CEILING})"
        )
    picks = summary["picks"]
    ratio = picks["phase_caps_ratio"]
    lines.append(
        f"phases' best caps {', '.join(f'{p} {a}' for p, a in picks['by_phase'].items())}: "
        f"{ratio:g}x apart ({'met' if ratio >= 4 else 'MISSED'}, aim 4x)"
    )
    gaps = summary["p99_gap_ms"].get(CANDIDATE, {})
    slo = summary["itl_slo_ms"]
    for tier in TIERS:
        p99 = gaps.get(tier)
        if p99 is not None:
            held = "held" if p99 <= slo[tier] else "NOT held"
            lines.append(
                f"{CANDIDATE} {tier}: P99 gap {p99:.0f} ms against its own "
                f"{slo[tier]:g} ms ({held})"
            )
    return lines


def format_tiers_markdown(summary: dict[str, Any]) -> str:
    picks = summary["picks"]
    arms = [a for a in summary["pooled"] if a != CEILING] + [CEILING]
    seeds = list(summary["per_seed"])
    headers = [
        "arm",
        "goodput",
        *(f"seed {s}" for s in seeds),
        *PHASES,
        "vs baseline, points",
        "of ceiling",
    ]
    rows = []
    for arm in arms:
        pooled = summary["pooled"][arm]
        per_seed = [summary["per_seed"][s]["goodput"].get(arm) for s in seeds]
        seed_cells = [
            _pct(summary["per_seed"][s]["ceiling"])
            if arm == CEILING
            else _pct(g["goodput"])
            if g
            else "-"
            for s, g in zip(seeds, per_seed, strict=True)
        ]
        phase_cells = [
            "-"
            if arm == CEILING
            else _pct(
                _mean([g["by_phase"][p] for g in per_seed if g and g["by_phase"][p] is not None])
            )
            for p in PHASES
        ]
        of = pooled["of_ceiling"]
        label = arm + (" (baseline)" if arm == picks["whole_run"] else "")
        rows.append(
            [
                label,
                _pct(pooled["goodput"]),
                *seed_cells,
                *phase_cells,
                _points(pooled["vs_baseline"]),
                "-" if of is None else f"{of:.2f}",
            ]
        )
    gap_rows = [
        [arm, *(f"{g:.0f}" if (g := gaps.get(t)) is not None else "-" for t in TIERS)]
        for arm, gaps in summary["p99_gap_ms"].items()
    ]
    slo = summary["itl_slo_ms"]
    return "\n\n".join(
        [
            format_table(headers, rows),
            format_table(["arm", *(f"P99 gap {t} (obj. {slo[t]:g} ms)" for t in TIERS)], gap_rows),
            "\n".join(f"- {line}" for line in verdict(summary)),
        ]
    )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
