"""``bench overhead``: the DLFP scheduler's own cost per step, against vLLM's ``Scheduler``.

In-process, with no engine, no model and no workers: vLLM's real ``Scheduler`` and
``DLFPScheduler`` (controller ``off``, ``dlfp``, ``dlfp-ct``) are built from a
``VllmConfig`` (a tiny Qwen3 ``config.json`` in a temporary directory) and a KV cache
config, as vLLM's own scheduler tests build theirs, and fed a synthetic model-runner
output: one sampled token for every decode and every finished prefill. A step is
``schedule()`` plus ``update_from_output()``, each timed with ``perf_counter_ns``;
building the output between them is not timed.

A cell is a scheduling policy and a number of waiting requests. ``--num-running``
requests decode throughout (``ignore_eos``, ``max_tokens`` beyond the run); the waiting
ones are long prompts that want one token each, and the waiting queue is topped up to
its size after every step, outside the timed region, so every step starts from the same
queues. (vLLM never admits a waiting request while ``max_num_seqs`` requests run, and the
DLFP scheduler then has no prefill to cap: the free slots are what make the capped path
run.) The arms of a cell run in blocks of ``--block-steps`` steps, in an order rotated by
one per block, so that the machine's drift falls on every arm alike. An arm's added cost
is the median over blocks of its block median minus the plain ``Scheduler``'s, with a
distribution-free 95% interval from the order statistics.

NOTE: a capped step also leaves vLLM less to do (fewer prefill tokens, fewer KV blocks to
allocate, fewer prompts finished per step), so the ``dlfp`` and ``dlfp-ct`` figures are
the DLFP bookkeeping net of the vLLM work the cap saves. ``off`` schedules exactly as
vLLM does: its figure is the bookkeeping alone.

The DLFP controllers read a plant clock instead of ``time.monotonic``: it advances, between
``schedule()`` and ``update_from_output()``, by a step time the plant gives the step's
shape, so the feedback and the deadline plan see steps of tens of milliseconds, as on the
real engine, rather than the microseconds a step takes here. Their cost models are fitted
on the plant before the warm-up, so ``dlfp-ct`` plans its mixed steps from the first one.

    dlfp-gateway bench overhead --out bench/results/overhead --lone-decode-ms 42
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.harness.overhead_arm import (
    ARMS,
    BASELINE,
    PLANT_NOISE,
    PLANT_S_PER_DECODE,
    PLANT_S_PER_PREFILL_TOKEN,
    ArmRun,
    Settings,
    build_scheduler,
)
from bench.harness.overhead_report import (
    AIM_WAITING,
    aims,
    format_aims,
    format_table,
    median_interval,
    write_csv,
)
from bench.lib.stats import percentile
from engine_worker.client.cpu_features import cpu_family_model, cpu_model_name

__all__ = ["AIM_WAITING", "ARMS", "BASELINE", "Settings", "add_parser", "run_bench"]


def run_cell(policy: str, num_waiting: int, settings: Settings, model_dir: Path) -> dict[str, Any]:
    runs = [
        ArmRun(arm, build_scheduler(arm, policy, model_dir, settings), num_waiting, settings)
        for arm in ARMS
    ]
    for arm_run in runs:
        arm_run.setup()
    num_blocks = -(-settings.num_steps // settings.block_steps)
    block_medians: dict[str, list[float]] = {run.arm: [] for run in runs}
    for block in range(num_blocks):
        first = block % len(runs)
        for arm_run in runs[first:] + runs[:first]:
            start = len(arm_run.step_ns)
            arm_run.run(min(settings.block_steps, settings.num_steps - start))
            block_medians[arm_run.arm].append(statistics.median(arm_run.step_ns[start:]) / 1000.0)
    base = block_medians[BASELINE]
    arms = {}
    for run in runs:
        us = [ns / 1000.0 for ns in run.step_ns]
        summary: dict[str, Any] = {
            "median_us": statistics.median(us),
            "p99_us": percentile(us, 99),
            "mean_prefill_tokens": statistics.fmean(run.prefill_tokens),
            "num_capped_steps": run.num_capped_steps,
            "num_planned_steps": run.num_planned_steps,
            "num_waiting_end": len(run.scheduler.waiting),
            "num_decoding_end": run.num_decoding(),
            "block_medians_us": block_medians[run.arm],
        }
        if run.arm != BASELINE:
            diffs = [a - b for a, b in zip(block_medians[run.arm], base, strict=True)]
            low, high = median_interval(diffs)
            added = statistics.median(diffs)
            summary["added"] = {
                "median_us": added,
                "low_us": low,
                "high_us": high,
                "num_pairs": len(diffs),
                "lone_decode_share": added / (settings.lone_decode_ms * 1000.0),
            }
        arms[run.arm] = summary
    return {"policy": policy, "num_waiting": num_waiting, "arms": arms, "runs": runs}


def run_bench(
    settings: Settings, out: Path | None, write_steps_csv: bool = False
) -> dict[str, Any]:
    """Every cell; prints the header, one progress line per cell, the table and the aims."""
    logging.getLogger("vllm").setLevel(logging.ERROR)
    host = {"cpu": cpu_model_name(), "family_model": cpu_family_model()}
    command = shlex.join(sys.argv)
    print(f"CPU: {host['cpu']} ({host['family_model']})\ncommand: {command}\n")
    cells = []
    with tempfile.TemporaryDirectory(prefix="overhead-model-") as tmp:
        from bench.harness.scheduler_factory import write_tiny_model

        model_dir = write_tiny_model(Path(tmp), max_position_embeddings=settings.max_model_len)
        for policy in settings.policies:
            for num_waiting in settings.waiting:
                started = time.monotonic()
                cells.append(run_cell(policy, num_waiting, settings, model_dir))
                added = {
                    a: s["added"]["median_us"]
                    for a, s in cells[-1]["arms"].items()
                    if a != BASELINE
                }
                added_text = ", ".join(f"{a} {us:+.1f} µs" for a, us in added.items())
                print(
                    f"[overhead] {policy} waiting={num_waiting}: {added_text} "
                    f"({time.monotonic() - started:.0f} s)",
                    file=sys.stderr,
                    flush=True,
                )
    record: dict[str, Any] = {
        "host": host,
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "settings": asdict(settings),
        "cells": [{k: v for k, v in cell.items() if k != "runs"} for cell in cells],
        "plant": {
            "lone_decode_ms": settings.lone_decode_ms,
            "ms_per_decode": PLANT_S_PER_DECODE * 1000.0,
            "ms_per_prefill_token": PLANT_S_PER_PREFILL_TOKEN * 1000.0,
            "lognormal_sigma": PLANT_NOISE,
        },
        "aims": aims(cells),
    }
    print(format_table(cells))
    print()
    print(format_aims(record["aims"], settings))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        path = out / "overhead.json"
        path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        print(f"record: {path}")
        if write_steps_csv:
            write_csv(out / "steps.csv", cells)
            print(f"steps: {out / 'steps.csv'}")
    return record


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(","))


def check(settings: Settings) -> None:
    """Refuses settings under which a cell would not measure what it says."""
    if min(settings.num_steps, settings.num_warmup_steps, settings.block_steps) < 1:
        raise ValueError("--steps, --warmup-steps and --block-steps must be at least 1")
    if not set(settings.policies) <= {"fcfs", "priority"}:
        raise ValueError(f"--policies: fcfs and/or priority, got {','.join(settings.policies)}")
    if not 0 < settings.num_running < settings.max_num_seqs:
        # NOTE: with no free slot no waiting request is a prefill candidate: nothing to cap.
        raise ValueError("need 0 < --num-running < --max-num-seqs")
    if settings.num_running >= settings.max_num_batched_tokens:
        raise ValueError("--max-num-batched-tokens must leave room beside the decodes")


def handler(args: argparse.Namespace) -> int:
    settings = Settings(
        num_running=args.num_running,
        waiting=args.waiting,
        policies=tuple(args.policies.split(",")),
        num_steps=args.steps,
        num_warmup_steps=args.warmup_steps,
        block_steps=args.block_steps,
        prompt_tokens=args.prompt_tokens,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        lone_decode_ms=args.lone_decode_ms,
        seed=args.seed,
    )
    try:
        check(settings)
    except ValueError as exc:
        print(f"bench overhead: {exc}", file=sys.stderr)
        return 2
    run_bench(settings, args.out, write_steps_csv=args.csv)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    d = Settings()
    p = sub.add_parser(
        "overhead",
        help="the DLFP scheduler's cost per step against vLLM's Scheduler, in-process",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--steps", type=int, default=d.num_steps, help="timed steps per arm and cell")
    p.add_argument("--warmup-steps", type=int, default=d.num_warmup_steps)
    p.add_argument("--block-steps", type=int, default=d.block_steps, help="steps per arm a block")
    p.add_argument("--num-running", type=int, default=d.num_running, help="decoding requests")
    p.add_argument("--waiting", type=_ints, default=d.waiting, help="waiting requests: N1,N2,...")
    p.add_argument("--policies", default=",".join(d.policies), help="fcfs,priority")
    p.add_argument("--prompt-tokens", type=int, default=d.prompt_tokens)
    p.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs)
    p.add_argument("--max-num-batched-tokens", type=int, default=d.max_num_batched_tokens)
    p.add_argument(
        "--lone-decode-ms",
        type=float,
        default=d.lone_decode_ms,
        help="the lone decode step the added cost is a share of, ms (42: the embedded model "
        "on an Intel Xeon with AMX)",
    )
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--out", type=Path, help="write overhead.json (and with --csv steps.csv) here")
    p.add_argument("--csv", action="store_true", help="also write every timed step")
    p.set_defaults(handler=handler)
