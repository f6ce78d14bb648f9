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
import csv
import json
import logging
import math
import random
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.lib.stats import percentile
from engine_worker.client.cpu_features import cpu_family_model, cpu_model_name
from engine_worker.contract.device_defaults import defaults_for
from engine_worker.controller.cost_model import StepShape, chunk_attention

BASELINE = "vllm"
ARMS = (BASELINE, "off", "dlfp", "dlfp-ct")
"""vLLM's ``Scheduler``, then ``DLFPScheduler`` under each controller."""
BLOCK_SIZE = 16
SAMPLED_TOKEN = 7
PROMPT_TOKEN = 11
DECODE_PROMPT_TOKENS = 128
AIM_WAITING = 32
AIM_ADDED_US = 100.0
AIM_LONE_DECODE_SHARE = 0.02
PLANT_S_PER_DECODE = 0.5e-3
PLANT_S_PER_PREFILL_TOKEN = 0.5e-3
PLANT_NOISE = 0.05
"""The plant: lone decode + 0.5 ms a decode + 0.5 ms a prefill token, times lognormal noise."""
NUM_PREFIT_STEPS = 48
TINY_QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "vocab_size": 1024,
}
"""Only its shape matters: the scheduler reads the config; no weights exist."""


@dataclass(frozen=True)
class Settings:
    num_running: int = 32
    waiting: tuple[int, ...] = (0, 32, 256)
    policies: tuple[str, ...] = ("fcfs", "priority")
    num_steps: int = 2000
    """Timed steps per arm and cell."""
    num_warmup_steps: int = 200
    block_steps: int = 20
    prompt_tokens: int = 2000
    max_num_seqs: int = 64
    max_num_batched_tokens: int = defaults_for("cpu").max_num_batched_tokens
    lone_decode_ms: float = 42.0
    seed: int = 0

    @property
    def max_model_len(self) -> int:
        num_steps = self.num_warmup_steps + self.num_steps + self.block_steps + 64
        return max(self.prompt_tokens + 1, DECODE_PROMPT_TOKENS + num_steps)


class PlantClock:
    """A monotonic clock in seconds that only the bench moves."""

    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def plant_s(settings: Settings, shape: StepShape, rng: random.Random) -> float:
    exact = (
        settings.lone_decode_ms / 1000.0
        + PLANT_S_PER_DECODE * shape.num_decode_tokens
        + PLANT_S_PER_PREFILL_TOKEN * shape.num_prefill_tokens
    )
    return exact * math.exp(rng.gauss(0.0, PLANT_NOISE))


def build_scheduler(arm: str, policy: str, model_dir: Path, settings: Settings) -> Any:
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    from engine_worker.contract.dlfp_config import ControllerMode, DLFPConfig
    from engine_worker.engine_core.scheduler import DLFPScheduler

    additional = {}
    if arm != BASELINE:
        additional["dlfp"] = DLFPConfig(controller=ControllerMode(arm)).model_dump(mode="json")
    max_model_len = settings.max_model_len
    vllm_config = VllmConfig(
        scheduler_config=SchedulerConfig(
            max_num_seqs=settings.max_num_seqs,
            max_num_batched_tokens=settings.max_num_batched_tokens,
            max_model_len=max_model_len,
            is_encoder_decoder=False,
            enable_chunked_prefill=True,
            policy=policy,
        ),
        model_config=ModelConfig(
            model=str(model_dir),
            skip_tokenizer_init=True,
            dtype="bfloat16",
            max_model_len=max_model_len,
        ),
        cache_config=CacheConfig(block_size=BLOCK_SIZE, enable_prefix_caching=False),
        additional_config=additional,
    )
    blocks_per_request = -(-max_model_len // BLOCK_SIZE)
    num_blocks = (settings.max_num_seqs + 1) * blocks_per_request
    vllm_config.cache_config.num_gpu_blocks = num_blocks
    spec = FullAttentionSpec(
        block_size=BLOCK_SIZE, num_kv_heads=1, head_size=32, dtype=torch.float32
    )
    kv_cache_config = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)],
    )
    cls = Scheduler if arm == BASELINE else DLFPScheduler
    return cls(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=BLOCK_SIZE,
    )


class ArmRun:
    """One arm's scheduler in one cell, kept in a steady state step after step."""

    def __init__(self, arm: str, scheduler: Any, num_waiting: int, settings: Settings) -> None:
        self.arm, self.scheduler, self.num_waiting = arm, scheduler, num_waiting
        self.settings = settings
        self.clock = PlantClock()
        self.rng = random.Random(settings.seed)
        self.plant_rng = random.Random(settings.seed + 1)
        self.decoder_ids: set[str] = set()
        self.num_added = 0
        self.step_ns: list[int] = []
        self.prefill_tokens: list[int] = []
        self.num_steps = self.num_capped_steps = self.num_planned_steps = 0
        from vllm.v1.outputs import ModelRunnerOutput

        self._runner_output_cls = ModelRunnerOutput
        if arm != BASELINE:
            from engine_worker.controller.cap_controller import PrefillCapController

            scheduler.dlfp_controller = PrefillCapController(
                scheduler.dlfp_params, clock=self.clock
            )
            self._prefit(scheduler.dlfp_controller.cost_model)

    def _prefit(self, cost_model: Any) -> None:
        rng = random.Random(self.settings.seed + 2)
        for index in range(NUM_PREFIT_STEPS):
            num_decode = rng.randint(1, self.settings.num_running)
            num_prefill = 0 if index % 4 == 0 else rng.randrange(8, 1025, 8)
            start = rng.randrange(0, self.settings.prompt_tokens)
            shape = StepShape(
                num_decode_tokens=num_decode,
                decode_context_tokens=num_decode * rng.randrange(100, 3000),
                num_prefill_tokens=num_prefill,
                attention_tokens2=chunk_attention(start, num_prefill) if num_prefill else 0.0,
            )
            cost_model.observe(shape, plant_s(self.settings, shape, rng))

    def _add(self, num_prompt_tokens: int, max_tokens: int) -> str:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        request_id = f"{self.arm}-{self.num_added}"
        self.num_added += 1
        self.scheduler.add_request(
            Request(
                request_id=request_id,
                prompt_token_ids=[PROMPT_TOKEN] * num_prompt_tokens,
                sampling_params=SamplingParams(max_tokens=max_tokens, ignore_eos=True),
                pooling_params=None,
                priority=self.rng.randint(0, 2),
            )
        )
        return request_id

    def setup(self) -> None:
        """The decoding requests, past their prefill, then the waiting queue."""
        max_tokens = self.settings.max_model_len - DECODE_PROMPT_TOKENS
        for _ in range(self.settings.num_running):
            self.decoder_ids.add(self._add(DECODE_PROMPT_TOKENS, max_tokens))
        while any(r.is_prefill_chunk or not r.num_computed_tokens for r in self.decoders()):
            self.step(top_up=False)
        self._top_up()
        self.run(self.settings.num_warmup_steps)
        self.step_ns.clear()
        self.prefill_tokens.clear()
        self.num_capped_steps = self.num_planned_steps = 0

    def decoders(self) -> list[Any]:
        return [self.scheduler.requests[r] for r in self.decoder_ids]

    def num_decoding(self) -> int:
        """The decoding requests still running as decodes (none preempted)."""
        running = self.scheduler.running
        return sum(r.request_id in self.decoder_ids and not r.is_prefill_chunk for r in running)

    def _top_up(self) -> None:
        while len(self.scheduler.waiting) < self.num_waiting:
            self._add(self.settings.prompt_tokens, 1)

    def step(self, top_up: bool = True) -> None:
        scheduler = self.scheduler
        # NOTE: only schedule() and update_from_output() are timed: the model runner's
        # output depends on what was scheduled, so it is built between them.
        start = time.perf_counter_ns()
        output = scheduler.schedule()
        scheduled = time.perf_counter_ns()
        req_ids = list(output.num_scheduled_tokens)
        requests = scheduler.requests
        sampled = [[] if requests[r].is_prefill_chunk else [SAMPLED_TOKEN] for r in req_ids]
        runner_output = self._runner_output_cls(
            req_ids=req_ids,
            req_id_to_index={r: i for i, r in enumerate(req_ids)},
            sampled_token_ids=sampled,
        )
        num_decode = sum(1 for r in req_ids if r in self.decoder_ids)
        num_prefill = output.total_num_scheduled_tokens - num_decode
        shape = StepShape(num_decode_tokens=num_decode, num_prefill_tokens=num_prefill)
        self.clock.now_s += plant_s(self.settings, shape, self.plant_rng)
        built = time.perf_counter_ns()
        scheduler.update_from_output(output, runner_output)
        done = time.perf_counter_ns()
        self.step_ns.append(scheduled - start + done - built)
        self.prefill_tokens.append(num_prefill)
        self.num_steps += 1
        if top_up:
            self._top_up()

    def run(self, num_steps: int) -> None:
        """``num_steps`` steps; a DLFP arm also counts its capped and planned mixed steps."""
        # NOTE: not the controller's state: reading it refits the cost model, which would
        # spare the next step its refit. Its step index counts schedule() calls, as this does.
        since = self.num_steps
        for _ in range(num_steps):
            self.step()
        if self.arm != BASELINE:
            records = self.scheduler.dlfp_get_steps(since)
            mixed = [r for r in records if r["is_mixed"] and r["cap_tokens"] is not None]
            self.num_capped_steps += len(mixed)
            self.num_planned_steps += sum(r["is_planned"] for r in mixed)


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
        model_dir = Path(tmp)
        config = {**TINY_QWEN3, "max_position_embeddings": settings.max_model_len}
        (model_dir / "config.json").write_text(json.dumps(config), encoding="utf-8")
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
