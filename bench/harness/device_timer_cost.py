"""``dlfp-gateway bench device-timer-cost``: what ``observation: device`` adds to a step.

In-process, with no engine: the worker's two calls of a step (``execute_model`` and
``sample_tokens``, here functions that return at once) run plain and wrapped by the
device timer (``engine_worker.worker.device_timer``, on ``time.perf_counter`` as on the CPU),
and the wrapped step also has its time read back from the shared-memory ring as the
scheduler reads it (``StepRing.read``). The two run in alternating blocks, so the
machine's drift falls on both alike; the figure is the median over blocks of the
difference of the block medians, with a distribution-free 95% interval. On CUDA the
timer records two events instead and reads them once complete: not measured here.

    dlfp-gateway bench device-timer-cost --out bench/results/device-timer-cost
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness.overhead_report import median_interval
from engine_worker.client.cpu_features import cpu_family_model, cpu_model_name
from engine_worker.contract.step_ring import STEP_INDEX_ATTR, StepRing
from engine_worker.worker.device_timer import DeviceStepTimer, PerfCounterClock

AIM_US = 50.0


class _SchedulerOutput:
    """What the worker is handed: only the step index the scheduler sets matters here."""

    def __init__(self, step_index: int) -> None:
        setattr(self, STEP_INDEX_ATTR, step_index)


def _execute_model(scheduler_output: Any) -> None:
    return None  # vLLM's execute_model returns None when sample_tokens follows


def _sample_tokens(*_: Any) -> object:
    return object()


def measure(num_blocks: int, block_steps: int) -> dict[str, Any]:
    ring = StepRing.create()
    try:
        timer = DeviceStepTimer(ring, PerfCounterClock())
        execute, sample = (
            timer.wrap_execute_model(_execute_model),
            timer.wrap_sample_tokens(_sample_tokens),
        )
        outputs = [_SchedulerOutput(k) for k in range(block_steps)]
        added_ns: list[float] = []
        for block in range(num_blocks):
            plain: list[int] = []
            timed: list[int] = []
            for arm in ("plain", "timed") if block % 2 == 0 else ("timed", "plain"):
                for k, output in enumerate(outputs):
                    start = time.perf_counter_ns()
                    if arm == "plain":
                        _execute_model(output)
                        _sample_tokens()
                        plain.append(time.perf_counter_ns() - start)
                    else:
                        execute(output)
                        sample()
                        ring.read(k)
                        timed.append(time.perf_counter_ns() - start)
            added_ns.append(statistics.median(timed) - statistics.median(plain))
        low, high = median_interval(added_ns)
        return {
            "added_us": statistics.median(added_ns) / 1000.0,
            "low_us": None if low is None else low / 1000.0,
            "high_us": None if high is None else high / 1000.0,
            "num_blocks": num_blocks,
            "block_steps": block_steps,
            "num_written": timer.num_written,
        }
    finally:
        ring.close()


def handler(args: argparse.Namespace) -> int:
    host = {"cpu": cpu_model_name(), "family_model": cpu_family_model()}
    print(f"CPU: {host['cpu']} ({host['family_model']})", file=sys.stderr)
    result = measure(args.blocks, args.block_steps)
    met = result["added_us"] < AIM_US
    print(
        f"device timer: +{result['added_us']:.1f} µs a step "
        f"(95% {result['low_us']:.1f} to {result['high_us']:.1f}; aim < {AIM_US:g} µs: "
        f"{'met' if met else 'missed'})"
    )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        record = {"host": host, "command": shlex.join(sys.argv), "date": time.time()}
        record |= {"result": result, "aim_us": AIM_US, "met": met}
        (args.out / "device-timer-cost.json").write_text(json.dumps(record, indent=1))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "device-timer-cost",
        help="what the device observation's timer adds to a step (in-process, no engine)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--blocks", type=int, default=40, help="alternating blocks (40)")
    p.add_argument("--block-steps", type=int, default=500, help="steps a block (500)")
    p.add_argument("--out", type=Path, help="a folder for device-timer-cost.json")
    p.set_defaults(handler=handler)
