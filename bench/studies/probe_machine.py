"""How fast is this machine right now, on the work a CPU decode step does?

One thread pinned to core 0 (as vLLM's CPU worker runs on 2 cores) streams a tensor the size
of the embedded model's float32 weights (memory bandwidth, what a small-batch decode step is
bound by) and multiplies matrices (compute), first with the other core idle, then with a
thread spinning on it (as the engine core's main thread does while it waits for a step).

    .venv/bin/python -m bench.studies.probe_machine --out $OUT/logs/machine.jsonl.gz

One JSON object on stdout, also appended to --out as a line (gzip for a ``.gz`` name):
GB/s and GFLOP/s, median of --repeats, per case.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bench.lib.records import append_jsonl

WEIGHTS_BYTES = 135_000_000 * 4  # SmolLM2-135M in float32


def _spin() -> None:
    os.sched_setaffinity(0, {1})
    while True:
        pass


def _median_s(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(repeats: int) -> dict[str, float]:
    src = torch.ones(WEIGHTS_BYTES // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    a = torch.randn(1024, 1024)
    b = torch.randn(1024, 1024)
    copy_s = _median_s(lambda: dst.copy_(src), repeats)
    mm_s = _median_s(lambda: torch.mm(a, b), repeats)
    return {
        "copy_gb_per_s": round(2 * WEIGHTS_BYTES / copy_s / 1e9, 2),  # read + write
        "matmul_gflop_per_s": round(2 * 1024**3 / mm_s / 1e9, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.sched_setaffinity(0, {0})
    result: dict[str, Any] = {"time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    result["other_core_idle"] = measure(args.repeats)
    spinner = mp.get_context("spawn").Process(target=_spin, daemon=True)
    spinner.start()
    try:
        time.sleep(0.5)
        result["other_core_spinning"] = measure(args.repeats)
    finally:
        spinner.terminate()
        spinner.join()
    print(json.dumps(result))
    if args.out:
        append_jsonl(args.out, result)


if __name__ == "__main__":
    main()
