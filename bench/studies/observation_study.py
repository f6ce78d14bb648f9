"""Which controller observation tracks the inter-token gaps the streams actually saw?

Reads trials recorded by ``dlfp-gateway bench`` against the gateway (each one
holds the scheduler's step telemetry, ``/admin/dlfp/steps``, beside the
client's per-chunk arrival times) and lines them up: a content chunk that
arrives at unix time ``t`` carries the token of the latest step that scheduled
work and completed before ``t`` (``done_unix_s``). The gap between a stream's
two consecutive one-token chunks is then attributed to that step.

For every mixed step (prefill beside at least one decode) with at least one
gap, it compares the step's

- ``interval_ms``: scheduler-call interval, what ``dlfp`` observes;
- ``busy_ms``: ``done(k) - max(done(k-1), dispatched(k))``, ``dlfp-ct`` busy;
- ``completion_interval_ms``: ``done(k) - done(k-1)``, ``dlfp-ct`` completion;
- ``max(busy, completion)``, ``dlfp-ct`` max;
- ``done(k) - done(k-D)`` with ``D`` the batch-queue size (derived here from
  the telemetry: what a stream that is in every D-th step waits);

with the median gap of the streams served by it. Writes
``observation-study.md`` (one table) and ``observation-study.png`` into the
results directory, and prints the table.

    python -m bench.studies.observation_study --results bench/results/batch-queue-zen3
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.lib.records import Trial, find_trials, read_trial

TOLERANCE = 0.15
"""The aim: an observation within 15% of the actual gap at the median of mixed steps."""


@dataclass(frozen=True)
class MixedStep:
    arm: str
    step: dict[str, Any]
    gap_ms: float
    """Median gap of the streams whose token this step produced."""
    lagged_ms: float | None
    """``done(k) - done(k-D)``."""


Observation = Callable[[MixedStep], float | None]


def _max_of(step: dict[str, Any]) -> float | None:
    values = [v for v in (step.get("busy_ms"), step.get("completion_interval_ms")) if v is not None]
    return max(values) if values else None


OBSERVATIONS: dict[str, Observation] = {
    "interval_ms (dlfp)": lambda m: m.step.get("interval_ms"),
    "busy_ms (dlfp-ct busy)": lambda m: m.step.get("busy_ms"),
    "completion_interval_ms (dlfp-ct completion)": lambda m: m.step.get("completion_interval_ms"),
    "max(busy, completion) (dlfp-ct max)": lambda m: _max_of(m.step),
    "done(k) - done(k-D)": lambda m: m.lagged_ms,
}


def _gaps_by_step(trial: Trial, steps: list[dict[str, Any]]) -> dict[int, list[float]]:
    """Stream gaps (ms) keyed by the step whose token ended them."""
    working = [s for s in steps if s["num_prefill_tokens"] + s["num_decode_tokens"] > 0]
    done = [float(s["done_unix_s"]) for s in working]
    start = float(trial.header["started_unix_s"])
    gaps: dict[int, list[float]] = {}
    for request in trial.requests:
        if not request.is_ok:
            continue
        arrivals = list(zip(request.chunk_s, request.chunk_num_tokens, strict=False))
        for (previous_s, _), (current_s, num_tokens) in itertools.pairwise(arrivals):
            if num_tokens not in (1, None):
                continue  # a chunk that merged tokens hides the gaps inside it
            index = bisect.bisect_right(done, start + current_s) - 1
            if index >= 0:
                step_index = int(working[index]["step_index"])
                gaps.setdefault(step_index, []).append((current_s - previous_s) * 1000)
    return gaps


def mixed_steps(arm: str, trial: Trial, queue_depth: int) -> list[MixedStep]:
    steps = sorted(
        (s for s in trial.steps if s.get("done_unix_s") is not None),
        key=lambda s: int(s["step_index"]),
    )
    by_index = {int(s["step_index"]): s for s in steps}
    gaps = _gaps_by_step(trial, steps)
    out = []
    for step in steps:
        index = int(step["step_index"])
        if not step["is_mixed"] or index not in gaps:
            continue
        earlier = by_index.get(index - queue_depth)
        lagged = None
        if earlier is not None:
            lagged = (float(step["done_unix_s"]) - float(earlier["done_unix_s"])) * 1000
        out.append(MixedStep(arm, step, statistics.median(gaps[index]), lagged))
    return out


def summarise(rows: list[MixedStep]) -> list[dict[str, Any]]:
    """Per observation: median gap, median observation, median ratio, share within 15%."""
    table = []
    for name, observe in OBSERVATIONS.items():
        observed = [(observe(m), m.gap_ms) for m in rows]
        pairs = [(o, g) for o, g in observed if o is not None and g > 0]
        if not pairs:
            continue
        ratios = [o / g for o, g in pairs]
        median_ratio = statistics.median(ratios)
        table.append(
            {
                "observation": name,
                "num_steps": len(pairs),
                "median_gap_ms": statistics.median(g for _, g in pairs),
                "median_observation_ms": statistics.median(o for o, _ in pairs),
                "median_ratio": median_ratio,
                "within_15pct_at_median": abs(median_ratio - 1) <= TOLERANCE,
                "share_within_15pct": sum(abs(r - 1) <= TOLERANCE for r in ratios) / len(ratios),
            }
        )
    return table


def _plot(rows: list[MixedStep], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # NOTE: before pyplot; a benchmark host has no display.
    import matplotlib.pyplot as plt

    names = list(OBSERVATIONS)
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 4.2), sharey=True)
    top = max((m.gap_ms for m in rows), default=1.0) * 1.1
    for ax, name in zip(axes, names, strict=True):
        for arm in sorted({m.arm for m in rows}):
            pairs = [(OBSERVATIONS[name](m), m.gap_ms) for m in rows if m.arm == arm]
            xs = [o for o, _ in pairs if o is not None]
            ys = [g for o, g in pairs if o is not None]
            ax.scatter(xs, ys, s=8, alpha=0.6, label=arm)
        ax.plot([1, top], [1, top], color="black", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(1, top)
        ax.set_ylim(1, top)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("observation of the step, ms (log)")
    axes[0].set_ylabel("streams' actual gap ending at the step, ms (median)")
    axes[0].legend(fontsize=8)
    fig.suptitle("Mixed steps: each observation against the inter-token gap streams saw")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _queue_depth(results: Path) -> int:
    """The batch-queue size the server reported at start (``logs/admin-dlfp-*.json``)."""
    for saved in sorted((results / "logs").glob("admin-dlfp-*.json")):
        size = json.loads(saved.read_text()).get("state", {}).get("batch_queue_size")
        if size:
            return int(size)
    return 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--queue-depth", type=int, default=None, help="default: from the logs")
    args = parser.parse_args()
    depth = args.queue_depth or _queue_depth(args.results)
    rows: list[MixedStep] = []
    by_arm: dict[str, list[MixedStep]] = {}
    for arm, seeds in find_trials(args.results).items():
        for _, path in sorted(seeds.items()):
            found = mixed_steps(arm, read_trial(path), depth)
            rows += found
            by_arm.setdefault(arm, []).extend(found)
    lines = [
        f"Mixed steps of every trial under {args.results} (batch-queue size D = {depth}).",
        "",
        "| arm | observation | mixed steps | median gap ms | median observation ms | "
        "median obs/gap | within 15% at median | share of steps within 15% |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for arm, arm_rows in [("all", rows), *sorted(by_arm.items())]:
        for row in summarise(arm_rows):
            lines.append(
                f"| {arm} | {row['observation']} | {row['num_steps']} | "
                f"{row['median_gap_ms']:.0f} | {row['median_observation_ms']:.0f} | "
                f"{row['median_ratio']:.2f} | {'yes' if row['within_15pct_at_median'] else 'no'} | "
                f"{row['share_within_15pct']:.0%} |"
            )
    text = "\n".join(lines) + "\n"
    (args.results / "observation-study.md").write_text(text)
    if rows:
        _plot(rows, args.results / "observation-study.png")
    print(text)


if __name__ == "__main__":
    main()
