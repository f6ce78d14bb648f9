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

from bench.lib.records import Trial, find_trials, read_trial
from bench.lib.scrape import CAP, OBSERVATION
from bench.lib.stats import request_gaps


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
    return save_figure(fig, path)


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
    return save_figure(fig, path)


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
    return save_figure(fig, path)


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
    return save_figure(fig, path)


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


def host_label(results_dir: Path) -> str:
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


def save_figure(fig: plt.Figure, path: Path) -> Path:
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
