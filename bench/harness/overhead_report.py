"""What ``bench overhead`` reports: an arm's added cost and its interval, the aims, the table.

An arm's added cost is the median over blocks of its block median minus the plain
``Scheduler``'s, with a distribution-free 95% interval from the order statistics.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from bench.harness.overhead_arm import BASELINE, Settings

AIM_WAITING = 32
AIM_ADDED_US = 100.0
AIM_LONE_DECODE_SHARE = 0.02


def median_interval(values: list[float]) -> tuple[float | None, float | None]:
    """A distribution-free 95% interval for the median: order statistics k and n + 1 - k."""
    n, ordered = len(values), sorted(values)
    below, k = 0.0, 0
    while True:
        below += math.comb(n, k) / 2**n
        if below > 0.025:
            break
        k += 1
    if k == 0:
        return None, None
    return ordered[k - 1], ordered[n - k]


def aims(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per policy and DLFP arm, at ``AIM_WAITING`` waiting: under 100 us, under 2%."""
    out = []
    for cell in cells:
        if cell["num_waiting"] != AIM_WAITING:
            continue
        for arm, summary in cell["arms"].items():
            if arm == BASELINE:
                continue
            added = summary["added"]
            out.append(
                {
                    "policy": cell["policy"],
                    "arm": arm,
                    "added_median_us": added["median_us"],
                    "added_high_us": added["high_us"],
                    "below_us_met": added["median_us"] < AIM_ADDED_US,
                    "lone_decode_share": added["lone_decode_share"],
                    "below_share_met": added["lone_decode_share"] < AIM_LONE_DECODE_SHARE,
                }
            )
    return out


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def format_table(cells: list[dict[str, Any]]) -> str:
    lines = [
        "| policy | waiting | arm | median µs | P99 µs | added µs [95%] | of lone decode "
        "| prefill tokens/step | capped steps |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for cell in cells:
        for arm, s in cell["arms"].items():
            added = s.get("added")
            added_text = share = "-"
            if added is not None:
                low, high = _us(added["low_us"]), _us(added["high_us"])
                added_text = f"{added['median_us']:.1f} [{low}, {high}]"
                share = f"{100 * added['lone_decode_share']:.3f}%"
            capped = "-" if arm == BASELINE else str(s["num_capped_steps"])
            lines.append(
                f"| {cell['policy']} | {cell['num_waiting']} | {arm} | {s['median_us']:.1f} "
                f"| {_us(s['p99_us'])} | {added_text} | {share} "
                f"| {s['mean_prefill_tokens']:.0f} | {capped} |"
            )
    return "\n".join(lines)


def format_aims(results: list[dict[str, Any]], settings: Settings) -> str:
    lines = [
        f"Aims at {settings.num_running} running and {AIM_WAITING} waiting: added median "
        f"< {AIM_ADDED_US:.0f} µs a step and < {100 * AIM_LONE_DECODE_SHARE:.0f}% of the lone "
        f"decode step ({settings.lone_decode_ms:g} ms)"
    ]
    for aim in results:
        us = "met" if aim["below_us_met"] else "missed"
        share = "met" if aim["below_share_met"] else "missed"
        lines.append(
            f"- {aim['policy']} {aim['arm']}: {aim['added_median_us']:.1f} µs "
            f"(95% up to {_us(aim['added_high_us'])}): {us}; "
            f"{100 * aim['lone_decode_share']:.3f}%: {share}"
        )
    return "\n".join(lines)


def write_csv(path: Path, cells: list[dict[str, Any]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["policy", "num_waiting", "arm", "step", "step_ns", "prefill_tokens"])
        for cell in cells:
            for run in cell["runs"]:
                for step, (ns, tokens) in enumerate(
                    zip(run.step_ns, run.prefill_tokens, strict=True)
                ):
                    writer.writerow(
                        [cell["policy"], cell["num_waiting"], run.arm, step, ns, tokens]
                    )
