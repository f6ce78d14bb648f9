"""The plot of interference episodes: each arm's window P99 gap against its arrivals' TTFT."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from bench.episodes.stats import static_arms
from bench.lib.plots import arm_styles, host_label, save_figure


def episode_frontier(summary: dict[str, Any], out_dir: Path) -> Path:
    """``episodes-frontier.png``: window P99 gap against mean arrival TTFT, per arm.

    The static caps are joined in cap order (the frontier a static choice can reach);
    the ITL objective is the horizontal line; horizontal error bars are the 95% intervals
    of the per-episode mean TTFT, vertical ones the window P99 gap's bootstrap interval.
    The host comes from ``host.json`` in ``out_dir`` or its parent.
    """
    arms = summary["arms"]
    styles = arm_styles(list(arms))
    fig, ax = plt.subplots(figsize=(7.5, 5))
    static = static_arms(arms)
    points = {
        a: (s["ttft_mean_episode_mean"], s["window_p99_gap_ms"])
        for a, s in arms.items()
        if s["ttft_mean_episode_mean"]["mean"] is not None and s["window_p99_gap_ms"] is not None
    }
    line = [(points[a][0]["mean"] / 1000, points[a][1]) for a in static if a in points]
    if line:
        ax.plot(*zip(*line, strict=True), color="0.6", linewidth=1, zorder=1, label="static caps")
    for arm, (ttft, p99) in points.items():
        low, high = ttft.get("low"), ttft.get("high")
        xerr = (
            None if low is None else [[(ttft["mean"] - low) / 1000], [(high - ttft["mean"]) / 1000]]
        )
        # NOTE: summaries written before the interval existed have no such key.
        gap = arms[arm].get("window_p99_gap_interval_ms")
        yerr = None if gap is None else [[p99 - gap["low"]], [gap["high"] - p99]]
        ax.errorbar(
            ttft["mean"] / 1000,
            p99,
            xerr=xerr,
            yerr=yerr,
            fmt=styles[arm]["marker"],
            color=styles[arm]["color"],
            label=arm,
            capsize=3,
            zorder=2,
        )
    slo = summary["itl_slo_ms"]
    ax.axhline(slo, color="red", linestyle="--", linewidth=1, label=f"ITL objective {slo:g} ms")
    ax.set_xlabel("mean arrival TTFT, s (95% interval over episodes)")
    ax.set_ylabel("window P99 gap of the decoding streams, ms (95% bootstrap)")
    ax.set_yscale("log")
    ax.legend(fontsize="x-small", ncol=2)
    host = host_label(out_dir) or host_label(out_dir.parent)
    decoders = summary.get("plan", {}).get("shape", {}).get("num_decoders")
    streams = f", {decoders} decoding streams" if decoders else ""
    ax.set_title(f"Interference episodes{streams}{host}", fontsize="small")
    return save_figure(fig, out_dir / "episodes-frontier.png")
