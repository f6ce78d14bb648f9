"""The summary of a results directory: one table on stdout and ``summary.json``.

Everything is recomputed from the raw trial files, so the summary of a run that
was interrupted and resumed is the same as that of a run in one go.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.lib.records import find_trials, read_trial
from bench.lib.stats import SLO, Summary, summarize

SUMMARY_FILE = "summary.json"


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "-" * len(line)]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


def fmt(value: float | int | None, scale: float = 1.0, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value * scale:.{digits}f}"


def summarize_results(results_dir: Path, slo: SLO) -> dict[str, Any]:
    """``{"slo", "arms": {arm: {"seeds": {seed: summary}, "pooled": summary}}}``."""
    arms: dict[str, Any] = {}
    for arm, paths in find_trials(results_dir).items():
        trials = {seed: read_trial(path) for seed, path in sorted(paths.items())}
        arms[arm] = {
            "seeds": {str(seed): summarize([t], slo) for seed, t in trials.items()},
            "pooled": summarize(list(trials.values()), slo),
        }
    return {"results_dir": str(results_dir), "slo": asdict(slo), "arms": arms}


def _row(arm: str, seed: str, s: Summary) -> list[str]:
    hit_rate = s.get("prefix_cache_hit_rate")
    return [
        arm,
        seed,
        f"{s['num_ok']}/{s['num_requests']}",
        fmt(s["itl_p50_ms"]),
        fmt(s["itl_p90_ms"]),
        fmt(s["itl_p99_ms"]),
        fmt(s["ttft_p50_ms"], 1e-3, 2),
        fmt(s["ttft_p99_ms"], 1e-3, 2),
        fmt(s["e2e_p50_ms"], 1e-3, 1),
        fmt(s["e2e_p99_ms"], 1e-3, 1),
        fmt(s["output_tps"], digits=1),
        fmt(s["request_tps"], digits=3),
        f"{s['num_slo_met']}/{s['num_requests']}",
        fmt(hit_rate, 100, 1),
    ]


HEADERS = (
    "arm",
    "seed",
    "ok",
    "ITL p50 ms",
    "p90",
    "p99",
    "TTFT p50 s",
    "p99",
    "E2E p50 s",
    "p99",
    "out tok/s",
    "req/s",
    "SLO met",
    "cache hit %",
)


def format_summary(summary: dict[str, Any]) -> str:
    rows = []
    for arm, data in summary["arms"].items():
        rows += [_row(arm, seed, s) for seed, s in data["seeds"].items()]
        if len(data["seeds"]) > 1:
            rows.append(_row(arm, "all", data["pooled"]))
    slo = summary["slo"]
    which = "max" if slo["itl_percentile"] >= 100 else f"P{slo['itl_percentile']:g}"
    note = (
        f"SLO: TTFT <= {slo['ttft_ms']:g} ms and the request's {which} gap "
        f"<= {slo['itl_ms']:g} ms. ITL pooled over every gap; 'all' pools the seeds."
    )
    return format_table(HEADERS, rows) + "\n" + note


def write_summary(results_dir: Path, slo: SLO) -> dict[str, Any]:
    summary = summarize_results(results_dir, slo)
    save_summary(results_dir, summary)
    return summary


def save_summary(results_dir: Path, summary: dict[str, Any]) -> Path:
    path = results_dir / SUMMARY_FILE
    results_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return path


def summary_differences(results_dir: Path, summary: dict[str, Any]) -> list[str]:
    """Where a recomputed summary differs from the ``summary.json`` written before."""
    path = results_dir / SUMMARY_FILE
    if not path.exists():
        return [f"{path}: missing"]
    saved = json.loads(path.read_text(encoding="utf-8"))
    return _differences(saved, json.loads(json.dumps(summary)), str(path))


def checked(results: Path, summary: dict[str, Any]) -> int:
    """0 if ``summary.json`` holds what the records give now, else 1 and where it differs."""
    differences = summary_differences(results, summary)
    for line in differences[:20]:
        print(f"differs: {line}", file=sys.stderr)
    if len(differences) > 20:
        print(f"... and {len(differences) - 20} more", file=sys.stderr)
    print(f"{results / 'summary.json'}: {'differs' if differences else 'matches the records'}")
    return 1 if differences else 0


def _differences(saved: Any, new: Any, where: str) -> list[str]:
    if isinstance(saved, dict) and isinstance(new, dict):
        found = [f"{where}/{k}: only in the file" for k in saved.keys() - new.keys()]
        found += [f"{where}/{k}: only recomputed" for k in new.keys() - saved.keys()]
        for key in saved.keys() & new.keys():
            found += _differences(saved[key], new[key], f"{where}/{key}")
        return sorted(found)
    return [] if saved == new else [f"{where}: {saved!r} in the file, {new!r} recomputed"]


def cache_warnings(summary: dict[str, Any], threshold: float = 0.05) -> list[str]:
    """Trials whose prompts were partly served from the prefix cache."""
    warnings = []
    for arm, data in summary["arms"].items():
        for seed, s in data["seeds"].items():
            rate = s.get("prefix_cache_hit_rate")
            if rate is not None and rate > threshold:
                warnings.append(
                    f"{arm} seed {seed}: {rate:.0%} of prompt tokens hit the prefix "
                    "cache (does the endpoint honour cache_salt?)"
                )
    return warnings
