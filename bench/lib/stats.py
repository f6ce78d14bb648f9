"""Latency percentiles, throughput and goodput of one or several trials.

Definitions (every figure is over the *measured* requests; warm-ups are left out):

- ITL: the gaps between consecutive content chunks of a request, pooled over all
  gaps of all successful requests. A chunk that carries k > 1 tokens adds k - 1
  gaps of zero (the tokens arrived together), so a request of n tokens whose
  chunk sizes are known has exactly n - 1 gaps.
- TTFT: first content chunk minus send time. E2E: last content chunk minus send time.
- Percentiles interpolate linearly between order statistics (numpy's default,
  as vLLM's own benchmark uses).
- Output throughput: generated tokens of successful requests over the measured
  window (first measured send to last measured end); request throughput likewise.
- Goodput: a request meets the SLO when it succeeded, its TTFT is within the TTFT
  SLO, and its own ``itl_percentile`` gap (default 100: its largest gap) is within
  the ITL SLO. The largest gap is the stall a reader of that stream sees.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from bench.lib.records import RequestRecord, Trial
from bench.lib.scrape import CAP, PREFIX_HITS, PREFIX_QUERIES

PERCENTILES = (50, 90, 99)
ON_TARGET = 0.15
"""A mixed step is on target when its busy time is within 15% of the target."""
KINDS = ("short", "long")
"""Prompt kinds the workload sends; TTFT is also summarised per kind."""
Summary = dict[str, float | int | None]


@dataclass(frozen=True)
class SLO:
    ttft_ms: float
    itl_ms: float
    itl_percentile: float = 100.0
    """Which of a request's own gaps is judged: 100 = the largest, 99 = its P99 gap."""


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation; None for no values.

    NOTE: not the controller's rank rule (``engine_worker.controller.sliding_window``'s
    ``quantile``, a value seen): reports interpolate so that their figures agree with
    vLLM's, and the committed summaries hold this arithmetic to the last bit.
    """
    if not values:
        return None
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must lie in [0, 100], got {q}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def request_gaps(record: RequestRecord) -> list[float]:
    times = record.chunk_s
    gaps = [b - a for a, b in itertools.pairwise(times)]
    gaps += [0.0] * sum(max(0, (n or 1) - 1) for n in record.chunk_num_tokens)
    return gaps


def ttft_s(record: RequestRecord) -> float | None:
    if not record.chunk_s or record.send_s is None:
        return None
    return record.chunk_s[0] - record.send_s


def e2e_s(record: RequestRecord) -> float | None:
    if not record.chunk_s or record.send_s is None:
        return None
    return record.chunk_s[-1] - record.send_s


def meets_slo(record: RequestRecord, slo: SLO) -> bool:
    return slo_miss(record, slo) is None


def slo_miss(record: RequestRecord, slo: SLO) -> str | None:
    """Why a measured request missed the SLO (``failed``, ``ttft``, ``itl``, ``both``), or None."""
    ttft = ttft_s(record)
    if not record.is_ok or ttft is None:
        return "failed"
    gap = percentile(request_gaps(record), slo.itl_percentile) or 0.0
    late, stalled = ttft * 1000 > slo.ttft_ms, gap * 1000 > slo.itl_ms
    return ("both" if stalled else "ttft") if late else ("itl" if stalled else None)


def _window_s(records: Sequence[RequestRecord]) -> float:
    sends = [r.send_s for r in records if r.send_s is not None]
    ends = [r.end_s for r in records if r.end_s is not None]
    return max(ends) - min(sends) if sends and ends else 0.0


def _counter_delta(trial: Trial, name: str) -> float | None:
    values = [s.values[name] for s in trial.samples if name in s.values]
    return values[-1] - values[0] if len(values) >= 2 else None


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000


def _latencies(ok: Sequence[RequestRecord], summary: Summary) -> None:
    gaps = [g for r in ok for g in request_gaps(r)]
    ttfts = [t for r in ok if (t := ttft_s(r)) is not None]
    e2es = [t for r in ok if (t := e2e_s(r)) is not None]
    for name, values in (("itl", gaps), ("ttft", ttfts), ("e2e", e2es)):
        for q in PERCENTILES:
            summary[f"{name}_p{q}_ms"] = _ms(percentile(values, q))
        summary[f"{name}_mean_ms"] = _ms(sum(values) / len(values)) if values else None
    summary["num_itl_gaps"] = len(gaps)
    for kind in KINDS:
        kind_ttfts = [t for r in ok if r.kind == kind and (t := ttft_s(r)) is not None]
        for q in (50, 99):
            summary[f"ttft_{kind}_p{q}_ms"] = _ms(percentile(kind_ttfts, q))
        summary[f"ttft_{kind}_mean_ms"] = (
            _ms(sum(kind_ttfts) / len(kind_ttfts)) if kind_ttfts else None
        )


def _server_side(trials: Sequence[Trial], summary: Summary) -> None:
    hits = [d for t in trials if (d := _counter_delta(t, PREFIX_HITS)) is not None]
    queries = [d for t in trials if (d := _counter_delta(t, PREFIX_QUERIES)) is not None]
    summary["prefix_cache_hit_tokens"] = sum(hits) if hits else None
    summary["prefix_cache_hit_rate"] = sum(hits) / sum(queries) if hits and sum(queries) else None
    caps = [s.values[CAP] for t in trials for s in t.samples if CAP in s.values]
    summary["cap_mean_tokens"] = sum(caps) / len(caps) if caps else None


def _controller_steps(trials: Sequence[Trial], summary: Summary) -> None:
    """How well mixed steps that filled their cap hit the target (step telemetry).

    A step filled its cap when its prefill tokens reached the cap it was
    scheduled under: the controller's choice limited it. Each step carries the
    target in force when it was scheduled.
    """
    full = [
        (s["busy_ms"], s["target_ms"])
        for t in trials
        for s in t.steps
        if s.get("is_mixed")
        and s.get("busy_ms") is not None
        and s.get("target_ms")
        and s.get("cap_tokens")
        and s["num_prefill_tokens"] >= s["cap_tokens"]
    ]
    summary["num_full_cap_steps"] = len(full)
    summary["full_cap_on_target"] = (
        sum(abs(busy - target) <= ON_TARGET * target for busy, target in full) / len(full)
        if full
        else None
    )
    summary["full_cap_over_target"] = (
        sum(busy > (1 + ON_TARGET) * target for busy, target in full) / len(full) if full else None
    )


def _machine_speed(trials: Sequence[Trial], summary: Summary) -> None:
    """The median busy time of a step that decodes one request and nothing else.

    The same work in every arm and trial, so it shows the machine's own speed at the time
    (on a shared 2-core guest it drifts); it is not a latency the arms cause.
    """
    lone = [
        s["busy_ms"]
        for t in trials
        for s in t.steps
        if s.get("busy_ms") is not None
        and s.get("num_decoding") == 1
        and s.get("num_prefill_tokens") == 0
    ]
    summary["num_lone_decode_steps"] = len(lone)
    summary["lone_decode_step_ms"] = percentile(lone, 50) if lone else None


def summarize(trials: Sequence[Trial], slo: SLO) -> Summary:
    """The figures of one trial, or of several pooled (gaps pooled, windows added)."""
    measured = [r for t in trials for r in t.measured]
    ok = [r for r in measured if r.is_ok]
    window_s = sum(_window_s(t.measured) for t in trials)
    num_tokens = sum(int((r.usage or {}).get("completion_tokens") or 0) for r in ok)
    misses = [slo_miss(r, slo) for r in measured]
    num_slo_met = misses.count(None)
    summary: Summary = {
        "num_trials": len(trials),
        "num_requests": len(measured),
        "num_ok": len(ok),
        "num_failed": len(measured) - len(ok),
        "num_output_tokens": num_tokens,
        "window_s": window_s,
    }
    _latencies(ok, summary)
    summary |= {
        "output_tps": num_tokens / window_s if window_s > 0 else None,
        "request_tps": len(ok) / window_s if window_s > 0 else None,
        "num_slo_met": num_slo_met,
        **{f"num_missed_{why}": misses.count(why) for why in ("failed", "ttft", "itl", "both")},
        "slo_attainment": num_slo_met / len(measured) if measured else None,
        "goodput_rps": num_slo_met / window_s if window_s > 0 else None,
    }
    _server_side(trials, summary)
    _controller_steps(trials, summary)
    _machine_speed(trials, summary)
    return summary


def bootstrap_percentile_interval(
    groups: Sequence[Sequence[float]],
    q: float,
    *,
    num_resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float] | None:
    """A percentile bootstrap interval of ``percentile`` of the pooled ``groups``,
    resampling whole groups (episodes, trials) with replacement; None for fewer than two
    non-empty groups. ``seed`` fixes the resamples, so a summary recomputes to the bit.

    Each resample pools the values of the groups it drew and takes their q-th percentile;
    the interval is the ``(1 - level) / 2`` and ``(1 + level) / 2`` percentiles of those.
    Only a pool's upper order statistics matter for a high q, so each group is sorted once
    and a resample merges only the top of each group it drew.
    """
    present = [sorted(g, reverse=True) for g in groups if g]
    if len(present) < 2:
        return None
    rng = random.Random(seed)
    estimates = []
    for _ in range(num_resamples):
        drawn = [present[rng.randrange(len(present))] for _ in present]
        estimates.append(_top_percentile(drawn, q))
    ordered = [sorted(estimates, reverse=True)]
    tail = 100 * (1 - level) / 2
    return _top_percentile(ordered, tail), _top_percentile(ordered, 100 - tail)


def _top_percentile(descending: Sequence[Sequence[float]], q: float) -> float:
    """``percentile`` of the pooled groups (each sorted high to low), from their tops."""
    n = sum(len(g) for g in descending)
    rank = (n - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, n - 1)
    needed = n - low  # the ascending order statistics low and high are among the top needed
    top = sorted(itertools.chain.from_iterable(g[:needed] for g in descending), reverse=True)
    at_low, at_high = top[n - 1 - low], top[n - 1 - high]
    return at_low + (at_high - at_low) * (rank - low)
