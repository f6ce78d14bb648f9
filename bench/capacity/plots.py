"""The plots of a sweep: goodput, P99 ITL and P99 TTFT against the offered load, per arm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from bench.capacity.sweep import capacity_label
from bench.lib.plots import arm_styles, host_label, save_figure


def sweep_plots(summary: dict[str, Any], out_dir: Path) -> list[Path]:
    """``goodput-vs-rate.png`` and ``latency-vs-rate.png`` (P99 ITL and P99 TTFT) per arm."""
    styles = arm_styles(list(summary["arms"]))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    partial = False
    for arm, entry in summary["arms"].items():
        # The line joins the rates the capacity was judged on (every seed of the arm);
        # rates run at fewer seeds are open markers.
        judged = entry.get("capacity_rates", list(entry["rates"]))
        for kind, rates in (("judged", judged), ("partial", set(entry["rates"]) - set(judged))):
            rates = sorted(rates, key=float)
            goodput = [100 * (entry["rates"][r]["slo_attainment"] or 0.0) for r in rates]
            if kind == "judged":
                label = f"{arm} (capacity {capacity_label(entry)})"
                ax.plot([float(r) for r in rates], goodput, label=label, **styles[arm])
            elif rates:
                partial = True
                xs = [float(r) for r in rates]
                ax.plot(xs, goodput, linestyle="none", mfc="none", **styles[arm])
    ax.axhline(90, color="grey", linewidth=0.8, linestyle=":")
    if partial:
        ax.plot([], [], "o", mfc="none", color="grey", label="run at fewer seeds")
    ax.set_xlabel("offered load (request/s, Poisson)")
    ax.set_ylabel("goodput (% of requests within both SLOs)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title(f"Goodput against load{host_label(out_dir)}", fontsize="medium")
    written = [save_figure(fig, out_dir / "goodput-vs-rate.png")]
    fig, (itl, ttft) = plt.subplots(1, 2, figsize=(13, 4.5))
    for arm, entry in summary["arms"].items():
        rates = sorted(entry["rates"], key=float)
        xs = [float(r) for r in rates]
        itl.plot(xs, [entry["rates"][r]["itl_p99_ms"] for r in rates], label=arm, **styles[arm])
        ttft_s = [(entry["rates"][r]["ttft_p99_ms"] or 0) / 1000 for r in rates]
        ttft.plot(xs, ttft_s, **styles[arm])
    itl.set_ylabel("P99 ITL (ms)")
    ttft.set_ylabel("P99 TTFT (s)")
    for ax in (itl, ttft):
        ax.set_xlabel("offered load (request/s)")
        ax.grid(True, alpha=0.3)
    handles, labels = itl.get_legend_handles_labels()
    ttft.legend(handles, labels, fontsize="small", loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.suptitle(f"Tail latency against load{host_label(out_dir)}", fontsize="medium")
    written.append(save_figure(fig, out_dir / "latency-vs-rate.png"))
    return written
