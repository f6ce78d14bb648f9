"""The figures of interference episodes, per arm and paired by episode, and the verdict.

Definitions (``itl_slo_ms`` is the objective the run judges by):

- A *window gap* is a gap between consecutive chunks of a decoding stream that
  overlaps the interference window (it ends after the window starts and starts
  before it ends), plus, for a stream cut while stalled since before the window's
  end, the open gap up to the cut. A chunk of several tokens is one wait (no zero
  gaps, unlike the harness's ITL). Per arm, the window P99 and maximum gap pool
  every episode's window gaps; ``share_over_slo`` is the share of them over
  ``itl_slo_ms``.
- *Stream goodput* is the share of decoding streams whose worst window gap is
  within ``itl_slo_ms``: the stall a reader of that stream saw.
- *Arrival TTFT* is first token minus send of the long and short prompts that
  arrive in the window; an episode's figure is their mean (and per kind).
- The paper's *pooled P99 ITL* pools every gap of every stream, arrivals too.
- Intervals are two-sided 95% Student-t intervals over episodes: of the
  per-episode values for an arm's means, and of the per-episode log ratios for
  a paired ratio (reported as a geometric mean ratio). An arm's episodes that
  failed (an error, a refused request) are left out, and so are their pairs.

- An arm's window P99 gap has a 95% percentile bootstrap interval over its
  episodes (whole episodes resampled with replacement, their window gaps pooled,
  ``BOOTSTRAP_RESAMPLES`` resamples from a fixed seed). Its *feasibility* is
  ``within`` the objective when the interval's upper bound is at most
  ``itl_slo_ms``, ``not feasible`` when its lower bound exceeds it, and
  ``undecided`` otherwise (or with fewer than two episodes).

The verdict: a static cap (``fixed-<n>``) is *feasible* when its window P99 gap
(the point estimate) is at most ``itl_slo_ms``; ``within_static_arms`` are those
whose whole interval is. The reference is the feasible static cap with the lowest
mean arrival TTFT; every arm gets its paired TTFT ratio against it, overall and for
short prompts. ``dlfp-ct-repeat``, a second run of ``dlfp-ct`` in the same
episodes, gives the benchmark's own noise: its ratio to ``dlfp-ct``
should be within ``SENTINEL_TOLERANCE`` of 1.
"""

from __future__ import annotations

import itertools
import math
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from bench.episodes.run import EpisodeRecord, lone_decode_step_ms
from bench.lib.compare import paired_ci
from bench.lib.records import RequestRecord
from bench.lib.stats import bootstrap_percentile_interval, percentile, request_gaps, ttft_s

SENTINEL = "dlfp-ct-repeat"
SENTINEL_OF = "dlfp-ct"
SENTINEL_TOLERANCE = 0.05
STATIC_ARM = re.compile(r"^fixed-(\d+)$")
INTERVAL = (
    "two-sided 95% Student-t over episodes (log ratios for ratios); window P99 gap: "
    "95% percentile bootstrap over episodes"
)
BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, BOOTSTRAP_LEVEL = 2000, 0, 0.95
"""How the window P99 gap's interval is drawn; fixed, so a summary recomputes to the bit."""
WITHIN, NOT_FEASIBLE, UNDECIDED = "within", "not feasible", "undecided"


def window_gaps(
    record: RequestRecord, start_s: float, end_s: float, cut_s: float | None = None
) -> list[float]:
    """A decoding stream's gaps (s) between consecutive chunks that overlap
    ``[start_s, end_s]``, and, if it was cut while stalled since before ``end_s``, the
    open gap up to ``cut_s``: the waits its reader saw. A chunk of several tokens is one
    wait, not one plus zeros (zeros would dilute the tail with the very stall behind it)."""
    times = record.chunk_s
    gaps = [b - a for a, b in itertools.pairwise(times) if b > start_s and a < end_s]
    if cut_s is not None and times and times[-1] < end_s and cut_s > start_s:
        gaps.append(cut_s - times[-1])
    return gaps


def episode_figures(record: EpisodeRecord, itl_slo_ms: float) -> dict[str, Any]:
    """One arm's run of one episode: its window gaps and arrival TTFTs (ms)."""
    usable = record.error is None and record.window_start_s is not None
    start, end = record.window_start_s or 0.0, record.window_end_s or 0.0
    per_stream = [
        [1000 * g for g in window_gaps(r, start, end, record.cut_s)] for r in record.decoders
    ]
    gaps = [g for stream in per_stream for g in stream]
    ttft = {r.kind: [] for r in record.arrivals}  # type: dict[str, list[float]]
    for r in record.arrivals:
        value = ttft_s(r)
        if value is not None:
            ttft[r.kind].append(1000 * value)
    every = [t for ts in ttft.values() for t in ts]
    all_gaps = [1000 * g for r in (*record.decoders, *record.arrivals) for g in request_gaps(r)]
    return {
        "usable": usable,
        "error": record.error,
        "position": record.position,
        "window_s": end - start,
        "window_gaps_ms": gaps,
        "worst_gap_by_stream_ms": [max(s, default=0.0) for s in per_stream],
        "window_p99_gap_ms": percentile(gaps, 99),
        "window_max_gap_ms": max(gaps, default=None),
        "window_share_over_slo": (sum(g > itl_slo_ms for g in gaps) / len(gaps)) if gaps else None,
        "ttft_mean_ms": statistics.fmean(every) if every else None,
        "ttft_short_mean_ms": statistics.fmean(ttft["short"]) if ttft.get("short") else None,
        "ttft_long_mean_ms": statistics.fmean(ttft["long"]) if ttft.get("long") else None,
        "lone_decode_step_ms": lone_decode_step_ms(record),
        "all_gaps_ms": all_gaps,
    }


def _estimate(values: Sequence[float | None]) -> dict[str, Any]:
    present = [v for v in values if v is not None]
    ci = paired_ci(present)
    if ci is None:
        return {"mean": None, "low": None, "high": None, "n": 0}
    return {"mean": ci.mean, "low": ci.low, "high": ci.high, "n": ci.num_pairs}


def _ratio(values: Sequence[tuple[float, float]]) -> dict[str, Any]:
    """Geometric mean of per-episode ratios a/b and its t-interval, from the log ratios."""
    logs = [math.log(a / b) for a, b in values if a > 0 and b > 0]
    ci = paired_ci(logs)
    if ci is None:
        return {"ratio": None, "low": None, "high": None, "n": 0}
    return {
        "ratio": math.exp(ci.mean),
        "low": None if ci.low is None else math.exp(ci.low),
        "high": None if ci.high is None else math.exp(ci.high),
        "n": ci.num_pairs,
        "by_episode": [a / b for a, b in values],
    }


PER_EPISODE = (
    "window_p99_gap_ms",
    "window_max_gap_ms",
    "window_share_over_slo",
    "ttft_mean_ms",
    "ttft_short_mean_ms",
    "ttft_long_mean_ms",
    "lone_decode_step_ms",
)


def arm_summary(figures: dict[int, dict[str, Any]], itl_slo_ms: float) -> dict[str, Any]:
    """An arm's figures over its usable episodes (``figures`` by episode index)."""
    usable = {e: f for e, f in sorted(figures.items()) if f["usable"]}
    gaps = [g for f in usable.values() for g in f["window_gaps_ms"]]
    worst = [w for f in usable.values() for w in f["worst_gap_by_stream_ms"]]
    p99_interval = window_p99_interval([f["window_gaps_ms"] for f in usable.values()])
    summary: dict[str, Any] = {
        "episodes": sorted(usable),
        "failed_episodes": {str(e): f["error"] for e, f in figures.items() if not f["usable"]},
        "window_p99_gap_ms": percentile(gaps, 99),
        "window_p99_gap_interval_ms": p99_interval,
        "feasibility": feasibility(p99_interval, itl_slo_ms),
        "window_max_gap_ms": max(gaps, default=None),
        "window_share_over_slo": (sum(g > itl_slo_ms for g in gaps) / len(gaps)) if gaps else None,
        "stream_goodput": (sum(w <= itl_slo_ms for w in worst) / len(worst)) if worst else None,
        "pooled_p99_itl_ms": percentile([g for f in usable.values() for g in f["all_gaps_ms"]], 99),
        "by_episode": {key: {e: f[key] for e, f in usable.items()} for key in PER_EPISODE},
    }
    for key in PER_EPISODE:
        summary[key.replace("_ms", "") + "_episode_mean"] = _estimate(
            [f[key] for f in usable.values()]
        )
    return summary


def window_p99_interval(gaps_by_episode: Sequence[Sequence[float]]) -> dict[str, Any] | None:
    """The bootstrap interval (ms) of the pooled window P99 gap, over episodes."""
    bounds = bootstrap_percentile_interval(
        gaps_by_episode,
        99,
        num_resamples=BOOTSTRAP_RESAMPLES,
        seed=BOOTSTRAP_SEED,
        level=BOOTSTRAP_LEVEL,
    )
    if bounds is None:
        return None
    return {
        "low": bounds[0],
        "high": bounds[1],
        "num_resamples": BOOTSTRAP_RESAMPLES,
        "seed": BOOTSTRAP_SEED,
        "level": BOOTSTRAP_LEVEL,
    }


def feasibility(interval: dict[str, Any] | None, slo_ms: float) -> str:
    """``within`` the objective, ``not feasible`` or ``undecided``, from the P99's interval."""
    if interval is None:
        return UNDECIDED
    if interval["high"] <= slo_ms:
        return WITHIN
    return NOT_FEASIBLE if interval["low"] > slo_ms else UNDECIDED


def paired_ratio(
    figures: dict[str, dict[int, dict[str, Any]]], arm: str, reference: str, key: str
) -> dict[str, Any]:
    """``arm``'s ``key`` over ``reference``'s, paired by the episodes usable in both."""
    a, b = figures[arm], figures[reference]
    pairs = [
        (a[e][key], b[e][key])
        for e in sorted(set(a) & set(b))
        if a[e]["usable"] and b[e]["usable"] and a[e][key] and b[e][key]
    ]
    return _ratio(pairs)


def static_cap(arm: str) -> int | None:
    match = STATIC_ARM.match(arm)
    return int(match.group(1)) if match else None


def static_arms(arms: Iterable[str]) -> list[str]:
    """The ``fixed-<n>`` arms among ``arms``, in cap order."""
    caps = {a: cap for a in arms if (cap := static_cap(a)) is not None}
    return sorted(caps, key=caps.__getitem__)


def verdict(
    figures: dict[str, dict[int, dict[str, Any]]], arms: dict[str, dict[str, Any]], slo_ms: float
) -> dict[str, Any]:
    """The feasible static caps, the best of them, and every arm's TTFT ratio against the
    reference: that best one, or where no static cap is feasible, the one with the tightest
    gaps (lowest window P99 gap)."""
    static = static_arms(arms)
    feasible = [
        a
        for a in static
        if arms[a]["window_p99_gap_ms"] is not None and arms[a]["window_p99_gap_ms"] <= slo_ms
    ]
    ttft = {a: arms[a]["ttft_mean_episode_mean"]["mean"] for a in feasible}
    best = min((a for a in feasible if ttft[a] is not None), key=lambda a: ttft[a], default=None)
    tightest = min(
        (a for a in static if arms[a]["window_p99_gap_ms"] is not None),
        key=lambda a: arms[a]["window_p99_gap_ms"],
        default=None,
    )
    reference = best if best is not None else tightest
    most = max((len(a["episodes"]) for a in arms.values()), default=0)
    result: dict[str, Any] = {
        "itl_slo_ms": slo_ms,
        "incomplete_arms": sorted(a for a, s in arms.items() if len(s["episodes"]) < most),
        "static_arms": static,
        "feasible_static_arms": feasible,
        "within_static_arms": [a for a in static if arms[a]["feasibility"] == WITHIN],
        "feasibility": {a: s["feasibility"] for a, s in arms.items()},
        "best_static_arm": best,
        "reference_arm": reference,
        "ratios": {},
    }
    if reference is not None:
        result["ratios"] = {
            arm: {
                "ttft": paired_ratio(figures, arm, reference, "ttft_mean_ms"),
                "ttft_short": paired_ratio(figures, arm, reference, "ttft_short_mean_ms"),
                "ttft_long": paired_ratio(figures, arm, reference, "ttft_long_mean_ms"),
            }
            for arm in arms
            if arm != reference
        }
    if SENTINEL in figures and SENTINEL_OF in figures:
        ratio = paired_ratio(figures, SENTINEL, SENTINEL_OF, "ttft_mean_ms")
        short = paired_ratio(figures, SENTINEL, SENTINEL_OF, "ttft_short_mean_ms")
        result["sentinel"] = {
            "arms": [SENTINEL, SENTINEL_OF],
            "ttft": ratio,
            "ttft_short": short,
            "tolerance": SENTINEL_TOLERANCE,
            "aim_met": ratio["ratio"] is not None
            and abs(ratio["ratio"] - 1.0) <= SENTINEL_TOLERANCE,
        }
    return result


def summarize_episodes(
    records: dict[str, dict[int, EpisodeRecord]], itl_slo_ms: float
) -> dict[str, Any]:
    """Per arm (``records`` by arm, then episode): the figures; then the verdict."""
    figures = {
        arm: {e: episode_figures(r, itl_slo_ms) for e, r in by_episode.items()}
        for arm, by_episode in records.items()
    }
    for episode, digest in _episode_prompts(records).items():
        for arm, by_episode in records.items():
            record = by_episode.get(episode)
            if record is not None and record.prompts_sha256 not in (None, digest):
                figures[arm][episode] |= {
                    "usable": False,
                    "error": "its prompts differ from the other arms' (another token counter?)",
                }
    arms = {arm: arm_summary(f, itl_slo_ms) for arm, f in figures.items()}
    return {
        "itl_slo_ms": itl_slo_ms,
        "interval": INTERVAL,
        "arms": arms,
        "verdict": verdict(figures, arms, itl_slo_ms),
    }


def _episode_prompts(records: dict[str, dict[int, EpisodeRecord]]) -> dict[int, str]:
    """Per episode, the prompts most of its arms sent (their digest)."""
    votes: dict[int, Counter[str]] = {}
    for by_episode in records.values():
        for episode, record in by_episode.items():
            if record.prompts_sha256 is not None:
                votes.setdefault(episode, Counter())[record.prompts_sha256] += 1
    return {episode: count.most_common(1)[0][0] for episode, count in votes.items()}


def _ms(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ci(est: dict[str, Any], scale: float = 1.0, digits: int = 0) -> str:
    if est.get("mean") is None:
        return "-"
    mean = f"{est['mean'] * scale:.{digits}f}"
    if est.get("low") is None:
        return mean
    return f"{mean} [{est['low'] * scale:.{digits}f}, {est['high'] * scale:.{digits}f}]"


def _r(ratio: dict[str, Any] | None) -> str:
    if not ratio or ratio.get("ratio") is None:
        return "-"
    if ratio.get("low") is None:
        return f"{ratio['ratio']:.2f}"
    return f"{ratio['ratio']:.2f} [{ratio['low']:.2f}, {ratio['high']:.2f}]"


def format_episodes_markdown(summary: dict[str, Any]) -> str:
    """The per-arm table and the verdict, in Markdown."""
    v = summary["verdict"]
    slo = summary["itl_slo_ms"]
    lines = [
        f"ITL objective {slo:g} ms; intervals: {summary['interval']}. Window gaps "
        "pooled over the episodes (the verdict's figure), then the per-episode P99's mean. "
        "Feasibility: within the objective when the P99's upper bound is, not feasible when "
        "its lower bound exceeds it, else undecided.",
        "",
        "| arm | episodes | window P99 gap ms [95%] | feasibility | max gap ms "
        "| per-episode P99 gap ms | gaps over SLO | stream goodput "
        "| arrival TTFT ms | short TTFT ms | long TTFT ms | TTFT ratio | short ratio "
        "| pooled P99 ITL ms | lone decode step ms |",
        "| --- | ---: | --- | --- | ---: | --- | ---: | ---: | --- | --- | --- | --- | --- "
        "| ---: | --- |",
    ]
    for arm, s in summary["arms"].items():
        ratios = v["ratios"].get(arm, {})
        ref = " (reference)" if arm == v["reference_arm"] else ""
        share = s["window_share_over_slo"]
        goodput = s["stream_goodput"]
        p99 = {"mean": s["window_p99_gap_ms"], **(s["window_p99_gap_interval_ms"] or {})}
        lines.append(
            f"| {arm}{ref} | {len(s['episodes'])} | {_ci(p99, 1, 1)} | {s['feasibility']} "
            f"| {_ms(s['window_max_gap_ms'])} | {_ci(s['window_p99_gap_episode_mean'])} "
            f"| {'-' if share is None else f'{100 * share:.1f}%'} "
            f"| {'-' if goodput is None else f'{100 * goodput:.0f}%'} "
            f"| {_ci(s['ttft_mean_episode_mean'])} | {_ci(s['ttft_short_mean_episode_mean'])} "
            f"| {_ci(s['ttft_long_mean_episode_mean'])} "
            f"| {'1' if ref else _r(ratios.get('ttft'))} "
            f"| {'1' if ref else _r(ratios.get('ttft_short'))} "
            f"| {_ms(s['pooled_p99_itl_ms'])} | {_ci(s['lone_decode_step_episode_mean'], 1, 1)} |"
        )
    lines.append("")
    if v["best_static_arm"] is None:
        lines.append(
            f"No static cap kept its window P99 gap within {slo:g} ms. The reference (the "
            f"tightest gaps): {v['reference_arm'] or 'none'}."
        )
    else:
        within = ", ".join(v["within_static_arms"]) or "none"
        lines.append(
            f"Static caps whose window P99 gap is within {slo:g} ms: "
            f"{', '.join(v['feasible_static_arms'])} (point estimate); {within} (interval). "
            f"The reference (lowest mean arrival TTFT among the first): {v['best_static_arm']}."
        )
    if v["incomplete_arms"]:
        lines.append(
            f"Fewer usable episodes than the others: {', '.join(v['incomplete_arms'])} "
            "(their unpaired means are over other episodes)."
        )
    sentinel = v.get("sentinel")
    if sentinel:
        met = "met" if sentinel["aim_met"] else "MISSED"
        lines.append(
            f"Sentinel {SENTINEL} / {SENTINEL_OF}: TTFT ratio {_r(sentinel['ttft'])}, short "
            f"{_r(sentinel['ttft_short'])}; within {100 * SENTINEL_TOLERANCE:.0f}% of 1: {met}."
        )
    failed = {a: s["failed_episodes"] for a, s in summary["arms"].items() if s["failed_episodes"]}
    for arm, episodes in failed.items():
        for episode, error in episodes.items():
            lines.append(f"- {arm} episode {episode} left out: {error}")
    return "\n".join(lines)
