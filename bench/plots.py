"""PNG plots of a results directory: ITL CDF per arm, the controller's cap over time,
and the step cost model's prediction against the observed busy time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # NOTE: before pyplot; a benchmark host has no display.
import matplotlib.pyplot as plt
from matplotlib.colors import to_hex
from matplotlib.ticker import FuncFormatter, NullFormatter

from bench.records import Trial, find_trials, read_trial
from bench.scrape import CAP, OBSERVATION
from bench.stats import request_gaps
from bench.sweep import capacity_label


def itl_cdf(gaps_by_arm: dict[str, list[float]], path: Path) -> Path:
    """Empirical CDF of the pooled inter-token gaps, one line per arm, log time axis."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arm, gaps in gaps_by_arm.items():
        # Zero gaps (tokens that arrived together) cannot sit on a log axis.
        ordered = sorted(max(g, 1e-4) * 1000 for g in gaps)
        if ordered:
            ys = [(i + 1) / len(ordered) for i in range(len(ordered))]
            ax.step(ordered, ys, where="post", label=f"{arm} (n={len(ordered)})")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("inter-token latency (ms, log)")
    ax.set_ylabel("fraction of gaps")
    ax.axhline(0.99, color="grey", linewidth=0.5, linestyle=":")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title("ITL CDF per arm (measured requests, seeds pooled)")
    return _save(fig, path)


def controller_cap(trials: list[Trial], path: Path) -> Path:
    """The cap (top) and the controller's observation (bottom) over each trial's time."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for trial in trials:
        label = f"{trial.arm} seed {trial.seed}"
        caps = [(s.t_s, s.values[CAP]) for s in trial.samples if CAP in s.values]
        observations = [
            (s.t_s, s.values[OBSERVATION] * 1000) for s in trial.samples if OBSERVATION in s.values
        ]
        if caps:
            top.step(*zip(*caps, strict=True), where="post", label=label)
        if observations:
            bottom.plot(*zip(*observations, strict=True), marker=".", linewidth=0.8, label=label)
    top.set_ylabel("prefill cap (tokens)")
    bottom.set_ylabel("observation (ms)")
    bottom.set_xlabel("time since trial start (s)")
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    if not any(CAP in s.values for t in trials for s in t.samples):
        top.text(
            0.5, 0.5, "no dlfp_controller_cap_tokens samples", ha="center", transform=top.transAxes
        )
    top.set_title("DLFP controller, from the server's /metrics")
    return _save(fig, path)


def cost_model_fit(trials: list[Trial], path: Path) -> Path | None:
    """Predicted against observed busy time of every step with prefill, from step telemetry."""
    points = [
        (s["predicted_busy_ms"], s["busy_ms"], bool(s.get("is_mixed")))
        for t in trials
        for s in t.steps
        if s.get("predicted_busy_ms") is not None
        and s.get("busy_ms") is not None
        and s.get("num_prefill_tokens")
    ]
    if not points:
        return None
    fig, ax = plt.subplots(figsize=(6, 6))
    for mixed, label in ((True, "mixed steps"), (False, "prefill-only steps")):
        xs = [p for p, _, m in points if m == mixed]
        ys = [o for _, o, m in points if m == mixed]
        if xs:
            ax.scatter(xs, ys, s=6, alpha=0.5, label=f"{label} (n={len(xs)})")
    top = max(max(p, o) for p, o, _ in points)
    ax.plot([0, top], [0, top], color="grey", linewidth=0.8, label="observed = predicted")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("predicted busy time at dispatch (ms, log)")
    ax.set_ylabel("observed busy time (ms, log)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    ax.set_title(f"Step cost model: {trials[0].arm}")
    return _save(fig, path)


def chunk_costs(rows: list[dict[str, Any]], path: Path) -> Path:
    """Median busy time of a mixed step against the context its chunk started at."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for chunk in sorted({r["chunk_tokens"] for r in rows}):
        mine = [r for r in rows if r["chunk_tokens"] == chunk]
        xs = [(r["context_from"] + r["context_to"]) / 2 for r in mine]
        ax.plot(xs, [r["median_busy_ms"] for r in mine], marker="o", label=f"{chunk} tokens")
    ax.set_xlabel("context before the chunk (tokens, bin centre)")
    ax.set_ylabel("median busy time of the mixed step (ms)")
    ax.grid(True, alpha=0.3)
    ax.legend(title="chunk", fontsize="small")
    ax.set_title("Cost of a prefill chunk beside one decode")
    return _save(fig, path)


def arm_styles(arms: list[str]) -> dict[str, dict[str, str]]:
    """A colour and marker per arm, no two arms alike (a sweep has more arms than the
    default colour cycle's ten): the 20 colours of ``tab20``, dark ones first, then the
    same colours with another marker."""
    colours = plt.get_cmap("tab20").colors
    order = [*range(0, 20, 2), *range(1, 20, 2)]
    markers = "osD^v"
    return {
        arm: {
            "color": to_hex(colours[order[i % 20]]),
            "marker": markers[(i // 20) % len(markers)],
        }
        for i, arm in enumerate(arms)
    }


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
    ax.set_title(f"Goodput against load{_host_label(out_dir)}", fontsize="medium")
    written = [_save(fig, out_dir / "goodput-vs-rate.png")]
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
    fig.suptitle(f"Tail latency against load{_host_label(out_dir)}", fontsize="medium")
    written.append(_save(fig, out_dir / "latency-vs-rate.png"))
    return written


def _host_label(results_dir: Path) -> str:
    """`` (CPU model and family, its features, dtype)`` from ``host.json``, or nothing."""
    try:
        host = json.loads((results_dir / "host.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    model = host.get("cpu_model")
    if model and host.get("cpu_family_model"):
        model = f"{model} {host['cpu_family_model']}"
    parts = [model, "+".join(host.get("cpu_features") or []), host.get("dtype")]
    return f" ({', '.join(str(p) for p in parts if p)})"


def _save(fig: plt.Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
    return path


def plot_results(results_dir: Path) -> list[Path]:
    """``plots/itl-cdf.png`` for all arms and ``plots/cap-<arm>.png`` per arm."""
    out = results_dir / "plots"
    trials = {
        arm: [read_trial(p) for _, p in sorted(paths.items())]
        for arm, paths in find_trials(results_dir).items()
    }
    gaps = {
        arm: [g for t in ts for r in t.measured if r.is_ok for g in request_gaps(r)]
        for arm, ts in trials.items()
    }
    written = [itl_cdf(gaps, out / "itl-cdf.png")]
    written += [controller_cap(ts, out / f"cap-{arm}.png") for arm, ts in trials.items()]
    for arm, ts in trials.items():
        fit = cost_model_fit(ts, out / f"cost-model-{arm}.png")
        if fit is not None:
            written.append(fit)
    return written


def episode_frontier(summary: dict[str, Any], out_dir: Path) -> Path:
    """``episodes-frontier.png``: window P99 gap against mean arrival TTFT, per arm.

    The static caps are joined in cap order (the frontier a static choice can reach);
    the ITL objective is the horizontal line; error bars are the 95% intervals of the
    per-episode means. The host comes from ``host.json`` in ``out_dir`` or its parent.
    """
    from bench.episode_stats import static_arms

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
        ax.errorbar(
            ttft["mean"] / 1000,
            p99,
            xerr=xerr,
            fmt=styles[arm]["marker"],
            color=styles[arm]["color"],
            label=arm,
            capsize=3,
            zorder=2,
        )
    slo = summary["itl_slo_ms"]
    ax.axhline(slo, color="red", linestyle="--", linewidth=1, label=f"ITL objective {slo:g} ms")
    ax.set_xlabel("mean arrival TTFT, s (95% interval over episodes)")
    ax.set_ylabel("window P99 gap of the decoding streams, ms")
    ax.set_yscale("log")
    ax.legend(fontsize="x-small", ncol=2)
    host = _host_label(out_dir) or _host_label(out_dir.parent)
    decoders = summary.get("plan", {}).get("shape", {}).get("num_decoders")
    streams = f", {decoders} decoding streams" if decoders else ""
    ax.set_title(f"Interference episodes{streams}{host}", fontsize="small")
    return _save(fig, out_dir / "episodes-frontier.png")
