"""The plots of interference episodes: each arm's window P99 gap against its arrivals' TTFT,
and its short prompts' TTFT against its long prompts'."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from bench.episodes.stats import WITHIN, static_arms
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
        # NOTE: summaries written before the interval existed have no such key.
        gap = arms[arm].get("window_p99_gap_interval_ms")
        yerr = None if gap is None else [[p99 - gap["low"]], [gap["high"] - p99]]
        ax.errorbar(
            ttft["mean"] / 1000,
            p99,
            xerr=_interval_s(ttft),
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
    streams, host = _run_labels(summary, out_dir)
    ax.set_title(f"Interference episodes{streams}{host}", fontsize="small")
    return save_figure(fig, out_dir / "episodes-frontier.png")


def episode_prompt_classes(summary: dict[str, Any], out_dir: Path) -> Path:
    """``episodes-short-long.png``: the short prompts' mean TTFT against the long prompts',
    per arm: what a step length trades between them (a short prompt waits for the step in
    flight; a long one pays each step's decodes and fixed cost).

    The static caps are joined in cap order; error bars are the 95% intervals of the
    per-episode means; a filled marker is an arm within the ITL objective (its window P99
    gap's interval), a hollow one any other.
    """
    arms = summary["arms"]
    styles = arm_styles(list(arms))
    fig, ax = plt.subplots(figsize=(7.5, 5))
    points = {
        a: (s["ttft_long_mean_episode_mean"], s["ttft_short_mean_episode_mean"])
        for a, s in arms.items()
        if s.get("ttft_long_mean_episode_mean", {}).get("mean") is not None
        and s.get("ttft_short_mean_episode_mean", {}).get("mean") is not None
    }
    line = [
        (points[a][0]["mean"] / 1000, points[a][1]["mean"] / 1000)
        for a in static_arms(arms)
        if a in points
    ]
    if line:
        ax.plot(*zip(*line, strict=True), color="0.6", linewidth=1, zorder=1, label="static caps")
    for arm, (long, short) in points.items():
        within = arms[arm].get("feasibility") == WITHIN
        ax.errorbar(
            long["mean"] / 1000,
            short["mean"] / 1000,
            xerr=_interval_s(long),
            yerr=_interval_s(short),
            fmt=styles[arm]["marker"],
            color=styles[arm]["color"],
            mfc=styles[arm]["color"] if within else "none",
            label=arm if within else f"{arm} (not within the objective)",
            capsize=3,
            zorder=2,
        )
    ax.set_xlabel("long prompts' mean TTFT, s (95% interval over episodes)")
    ax.set_ylabel("short prompts' mean TTFT, s (95% interval over episodes)")
    ax.legend(fontsize="x-small")
    streams, host = _run_labels(summary, out_dir)
    slo = summary["itl_slo_ms"]
    ax.set_title(
        f"Short against long prompts, ITL objective {slo:g} ms{streams}\n{host.strip()}",
        fontsize="small",
    )
    return save_figure(fig, out_dir / "episodes-short-long.png")


def _run_labels(summary: dict[str, Any], out_dir: Path) -> tuple[str, str]:
    """A title's ``, <n> decoding streams`` (from the plan) and `` (<host>)`` (from
    ``host.json`` in ``out_dir`` or its parent); each empty where unknown."""
    host = host_label(out_dir) or host_label(out_dir.parent)
    decoders = summary.get("plan", {}).get("shape", {}).get("num_decoders")
    return (f", {decoders} decoding streams" if decoders else ""), host


def _interval_s(estimate: dict[str, Any]) -> list[list[float]] | None:
    """An estimate's 95% interval as error bar lengths, s (None where it has none)."""
    low, high, mean = estimate.get("low"), estimate.get("high"), estimate["mean"]
    if low is None or high is None:
        return None
    return [[(mean - low) / 1000], [(high - mean) / 1000]]
