"""``bench sweep``: capacity under SLO, the protocol run at several Poisson rates per arm.

Each rate is an ordinary results folder (``rate-<r>/``), so a sweep resumes as
``bench`` does and ``bench compare`` works within one rate. Per arm and rate
the summary gives goodput (the share of measured requests with TTFT within
``ttft_slo_ms`` and every gap within ``itl_slo_ms``), P50 and P99 TTFT overall
and by prompt kind, and P99 ITL, pooled over the seeds. Per arm, the capacity
is the highest rate with goodput >= 90%, interpolated linearly between the
measured rates around the crossing; when every rate meets it the capacity is
only known to be at least the highest rate, and when none does, below the
lowest (``capacity_bound`` says which).

With ``stop_below`` set, the sweep only brackets each arm's capacity: an arm
is not run at a rate above one where its pooled goodput fell below
``stop_below``, nor below one where it already met 90% (any rate recorded in
the folder counts, so rates added later fill in the bracket). On a slow
machine one rate of one arm costs many minutes; the rates an arm skipped are
simply absent from the summary.

With ``--block N`` (``bench/capacity/blocks.py``) each rate runs in paired blocks, every arm on
each; the rate's figures pool an arm's blocks as they pool seeds, and the capacity "by
seed" is the capacity by block.
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import httpx

from bench.capacity.blocks import blocks_line, load_blocks, summary_entry
from bench.lib.calibrate import calibrated_workload, write_host
from bench.lib.endpoint import wait_ready
from bench.lib.loadgen import Arm, RunConfig, baseline_settings, run_all
from bench.lib.records import find_trials, read_trial
from bench.lib.stats import SLO, summarize
from bench.lib.tokens import TokenCounter

GOODPUT_TARGET = 0.9
MISSES = ("ttft", "itl", "both", "failed")
"""Why requests missed the SLO, in the order the table gives them."""


def rate_dir(results_dir: Path, rate_rps: float) -> Path:
    return results_dir / f"rate-{rate_rps:g}"


def parse_rates(text: str) -> tuple[float, ...]:
    try:
        rates = tuple(sorted(float(r) for r in text.split(",") if r.strip()))
    except ValueError as exc:
        raise ValueError(f"--rates: numbers separated by commas, got {text!r}") from exc
    if not rates or min(rates) <= 0:
        raise ValueError(f"--rates: positive request rates, got {text!r}")
    return rates


def pooled_by_rate(results_dir: Path, slo: SLO) -> dict[str, dict[float, dict[str, Any]]]:
    """Per arm, per recorded rate (ascending): its trials' seeds, each seed's goodput and
    lone-decode step time (the machine's speed then), and the figures pooled over the seeds."""
    arms: dict[str, dict[float, dict[str, Any]]] = {}
    for sub in sorted(results_dir.glob("rate-*"), key=lambda p: float(p.name[5:])):
        for arm, paths in find_trials(sub).items():
            trials = {seed: read_trial(path) for seed, path in sorted(paths.items())}
            by_seed = {str(seed): summarize([trial], slo) for seed, trial in trials.items()}
            arms.setdefault(arm, {})[float(sub.name[5:])] = {
                "seeds": sorted(paths),
                "slo_attainment_by_seed": {k: v["slo_attainment"] for k, v in by_seed.items()},
                "lone_decode_step_ms_by_seed": {
                    k: v["lone_decode_step_ms"] for k, v in by_seed.items()
                },
                **summarize(list(trials.values()), slo),
            }
    return arms


def capacity_by_seed(by_rate: dict[float, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each seed's own capacity, from the rates that seed was run at (for the spread)."""
    points: dict[str, list[tuple[float, float]]] = {}
    for rate, s in by_rate.items():
        for seed, goodput in s["slo_attainment_by_seed"].items():
            points.setdefault(seed, []).append((rate, goodput or 0.0))
    return {
        seed: {**capacity(p), "capacity_rates": [f"{r:g}" for r, _ in sorted(p)]}
        for seed, p in sorted(points.items())
    }


def arms_to_run(run: RunConfig, rate: float, slo: SLO, stop_below: float | None) -> tuple[Arm, ...]:
    """The arms whose capacity ``rate`` can still move (all of them without ``stop_below``).

    Capacity is where goodput first falls below 90% as the rate rises, so an arm gains
    nothing from a rate above one where its goodput fell below ``stop_below`` (not even more
    seeds at a rate it holds trials for), nor from a rate below one where it already met 90%.
    Only rates that hold every seed of this run count for either rule: a goodput pooled over
    fewer seeds is not the one this run would judge by. A recorded rate otherwise keeps the
    arm, so further seeds fill in the rates it holds.
    """
    if stop_below is None:
        return run.arms
    recorded = pooled_by_rate(run.results_dir, slo)
    kept = []
    for arm in run.arms:
        by_rate = recorded.get(arm.name, {})
        goodput = {
            r: s["slo_attainment"] or 0.0
            for r, s in by_rate.items()
            if set(run.seeds) <= set(s["seeds"])
        }
        if any(r < rate and g < stop_below for r, g in goodput.items()):
            print(
                f"[sweep] {arm.name}: missed at a lower rate; not run at {rate:g}", file=sys.stderr
            )
        elif rate in by_rate:
            kept.append(arm)  # recorded: run_all skips the trials it already holds
        elif any(r > rate and g >= GOODPUT_TARGET for r, g in goodput.items()):
            print(f"[sweep] {arm.name}: met at a higher rate; not run at {rate:g}", file=sys.stderr)
        else:
            kept.append(arm)
    return tuple(kept)


async def run_sweep(
    run: RunConfig,
    rates: tuple[float, ...],
    counter: TokenCounter,
    slo: SLO,
    stop_below: float | None = None,
) -> None:
    """Calibrate once (long-prompt lengths only: the rates are the sweep's), then each rate.

    The arm order rotates by one per rate, on top of run_all's rotation per seed.
    """
    workload = run.workload
    async with httpx.AsyncClient(timeout=run.client.request_timeout_s) as http:
        await wait_ready(http, run.client.base_url, run.client.api_key, run.ready_timeout_s)
        await write_host(http, run.client.base_url, run.admin_token, run.results_dir)
        if run.calibrate_fraction is not None:
            calibrated = await calibrated_workload(
                http, run.client, workload, run.calibrate_fraction, run.results_dir, counter
            )
            workload = replace(workload, long_min_tokens=calibrated.long_min_tokens)
            workload = replace(workload, long_max_tokens=calibrated.long_max_tokens)
        if any(arm.admin_patch is not None for arm in run.arms):
            run = replace(run, baseline_settings=await baseline_settings(http, run))
    for number, rate in enumerate(rates, 1):
        arms = arms_to_run(run, rate, slo, stop_below)
        print(
            f"[sweep] rate {number}/{len(rates)}: {rate:g} request/s, "
            f"arms {', '.join(a.name for a in arms) or 'none'}",
            file=sys.stderr,
        )
        if not arms:
            continue
        # NOTE: run_all rotates the arms per seed; rotating per rate as well keeps a
        # one-seed sweep from running the same arm first (or after the same one) at every rate.
        await run_all(
            replace(
                run,
                arms=arms,
                rotation=run.rotation + number - 1,
                results_dir=rate_dir(run.results_dir, rate),
                workload=replace(workload, rate_rps=rate),
                calibrate_fraction=None,
            ),
            counter,
        )


def capacity(points: list[tuple[float, float]], target: float = GOODPUT_TARGET) -> dict[str, Any]:
    """The highest rate with goodput >= ``target``, interpolated; ``points`` = (rate, goodput)."""
    points = sorted(points)
    if not points:
        return {"capacity_rps": None, "capacity_bound": "unmeasured"}
    if all(g >= target for _, g in points):
        return {"capacity_rps": points[-1][0], "capacity_bound": "at_least"}
    if points[0][1] < target:
        return {"capacity_rps": None, "capacity_bound": "below_lowest_rate"}
    # The last rate that meets the target before the first that does not.
    for (r0, g0), (r1, g1) in itertools.pairwise(points):
        if g0 >= target > g1:
            return {
                "capacity_rps": r0 + (r1 - r0) * (g0 - target) / (g0 - g1),
                "capacity_bound": "interpolated",
            }
    return {"capacity_rps": points[0][0], "capacity_bound": "interpolated"}


def sweep_summary(results_dir: Path, slo: SLO) -> dict[str, Any]:
    """Per arm: per rate (seeds pooled) the figures, and the capacity (``summary.json``).

    The pooled capacity is judged on the rates that hold every seed the arm was run with
    (``capacity_rates``): goodputs pooled over different seeds are not one curve.
    """
    blocks = load_blocks(results_dir)
    arms: dict[str, dict[str, Any]] = {}
    for arm, by_rate in pooled_by_rate(results_dir, slo).items():
        seeds = set().union(*(s["seeds"] for s in by_rate.values()))
        points = [
            (rate, s["slo_attainment"] or 0.0)
            for rate, s in by_rate.items()
            if set(s["seeds"]) == seeds
        ]
        arms[arm] = {
            "rates": {
                f"{r:g}": s | ({"num_blocks": len(s["seeds"])} if blocks else {})
                for r, s in by_rate.items()
            },
            **capacity(points),
            "capacity_rates": [f"{r:g}" for r, _ in points],
            "capacity_by_seed": capacity_by_seed(by_rate),
        }
    summary = {"results_dir": str(results_dir), "slo": asdict(slo), "arms": arms}
    return summary | ({"blocks": summary_entry(blocks)} if blocks else {})


def seeds_are(summary: dict[str, Any]) -> str:
    """What a seed of the sweep is: a ``block`` in block mode."""
    return "block" if "blocks" in summary else "seed"


def capacity_label(entry: dict[str, Any]) -> str:
    """``0.312``, ``>= 0.45`` (every rate met the target) or ``< 0.15`` (none did), on the
    rates the capacity was judged on (``capacity_rates``, else the entry's own)."""
    cap, bound = entry["capacity_rps"], entry["capacity_bound"]
    rates = sorted(float(r) for r in entry.get("capacity_rates") or entry["rates"])
    if bound == "below_lowest_rate" and rates:
        return f"< {rates[0]:g}"
    if cap is None:
        return "n/a"
    return f">= {cap:g}" if bound == "at_least" else f"{cap:.3f}"


def format_sweep(summary: dict[str, Any]) -> str:
    lines = blocks_line(summary)
    for arm, entry in summary["arms"].items():
        bound = entry["capacity_bound"]
        lines.append(f"{arm}: capacity {capacity_label(entry)} request/s ({bound})")
        if len(entry.get("capacity_by_seed", {})) > 1:
            lines.append(f"  by {seeds_are(summary)}: {seed_capacities(entry)}")
        for rate, s in entry["rates"].items():
            lines.append(
                f"  {rate:>6} req/s: goodput {100 * (s['slo_attainment'] or 0):5.1f}% of "
                f"{s['num_requests']}, TTFT p50/p99 {_s(s['ttft_p50_ms'])}/{_s(s['ttft_p99_ms'])} s"
                f" (short {_s(s['ttft_short_p50_ms'])}/{_s(s['ttft_short_p99_ms'])}, long "
                f"{_s(s['ttft_long_p50_ms'])}/{_s(s['ttft_long_p99_ms'])}), "
                f"ITL p99 {_s(s['itl_p99_ms'], 1)} ms"
            )
    return "\n".join(lines)


def seed_capacities(entry: dict[str, Any]) -> str:
    """``801: 0.205, 802: < 0.15``: each seed's capacity, on the rates that seed ran at."""
    by_seed = entry["capacity_by_seed"].items()
    return ", ".join(f"{seed}: {capacity_label(cap)}" for seed, cap in by_seed)


def format_sweep_markdown(summary: dict[str, Any]) -> str:
    """The same figures as a Markdown table, one row per arm and rate (for the README)."""
    by = seeds_are(summary)
    lines = [
        *(f"{line}\n" for line in blocks_line(summary)),
        "| arm | capacity req/s | rate req/s | requests | goodput | missed: TTFT / gap / both "
        "/ failed | TTFT P50 / P99 s | short P50 / P99 s | long P50 / P99 s | ITL P99 ms "
        f"| lone decode step ms, by {by} |",
        "| --- | --- | ---: | ---: | ---: | --- | --- | --- | --- | ---: | --- |",
    ]
    for arm, entry in summary["arms"].items():
        for number, (rate, s) in enumerate(entry["rates"].items()):
            first = number == 0
            lines.append(
                f"| {arm if first else ''} | {capacity_label(entry) if first else ''} | {rate} "
                f"| {s['num_requests']} | {100 * (s['slo_attainment'] or 0):.0f}% "
                f"| {' / '.join(str(s.get(f'num_missed_{w}', '-')) for w in MISSES)} "
                f"| {_s(s['ttft_p50_ms'])} / {_s(s['ttft_p99_ms'])} "
                f"| {_s(s['ttft_short_p50_ms'])} / {_s(s['ttft_short_p99_ms'])} "
                f"| {_s(s['ttft_long_p50_ms'])} / {_s(s['ttft_long_p99_ms'])} "
                f"| {_s(s['itl_p99_ms'], 1)} "
                f"| {' / '.join(_s(ms, 1) for ms in s['lone_decode_step_ms_by_seed'].values())} |"
            )
    spread = [
        f"- `{arm}` capacity by {by}: {seed_capacities(entry)}"
        for arm, entry in summary["arms"].items()
        if len(entry.get("capacity_by_seed", {})) > 1
    ]
    return "\n".join([*lines, *([""] if spread else []), *spread])


def _s(ms: float | None, scale: float = 1e-3) -> str:
    return "-" if ms is None else f"{ms * scale:.2f}" if scale < 1 else f"{ms:.0f}"
