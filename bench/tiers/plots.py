"""The plot of ``bench tiers``: per-request goodput by phase and arm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from bench.lib.plots import arm_styles, host_label, save_figure
from bench.tiers.workload import PHASES


def goodput_by_phase(summary: dict[str, Any], out_dir: Path) -> Path:
    """``tiers-goodput.png``: bars of each arm's goodput in each phase and over the whole
    run (the seeds' mean), the baseline's named; the ceiling's whole-run share as a line."""
    per_seed = list(summary["per_seed"].values())
    arms = sorted({a for s in per_seed for a in s["goodput"]})
    styles = arm_styles(arms)
    groups = [*PHASES, "whole run"]
    fig, ax = plt.subplots(figsize=(9, 4.8))
    width = 0.8 / max(1, len(arms))
    for i, arm in enumerate(arms):
        values = []
        for group in groups:
            found = [
                s["goodput"][arm]["goodput"]
                if group == "whole run"
                else s["goodput"][arm]["by_phase"][group]
                for s in per_seed
                if arm in s["goodput"]
            ]
            kept = [v for v in found if v is not None]
            values.append(100 * sum(kept) / len(kept) if kept else 0.0)
        label = arm + (" (baseline)" if arm == summary["picks"]["whole_run"] else "")
        xs = [g + (i - (len(arms) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, values, width, label=label, color=styles[arm]["color"])
    ceiling = [s["ceiling"] for s in per_seed if s["ceiling"] is not None]
    if ceiling:
        mean = 100 * sum(ceiling) / len(ceiling)
        ax.axhline(
            mean,
            color="red",
            linestyle="--",
            linewidth=1,
            label=f"ceiling (each phase's best cap) {mean:.0f}%",
        )
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel("requests meeting their own objectives, %")
    ax.set_ylim(0, 100)
    ax.set_title(f"bench tiers: goodput by phase{host_label(out_dir)}", fontsize="small")
    ax.legend(fontsize="x-small", ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.1))
    return save_figure(fig, out_dir / "tiers-goodput.png")
