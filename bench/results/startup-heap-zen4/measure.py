"""How long a collection of the oldest generation holds the gateway's event loop once the
real engine has started (the embedded model, this machine's defaults), before and after
``freeze_startup_heap``. Prints a table and writes ``results.json`` beside this file. Run
from the repository root, with nothing else running:
bench/results/startup-heap-zen4/run.sh"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import time
from pathlib import Path

from gateway.engine import build_engine, resolve_device
from gateway.settings import Settings
from gateway.startup_heap import freeze_startup_heap

ROUNDS = 7
OUT = Path(__file__).resolve().parent / "results.json"


def _collections_ms() -> list[float]:
    """``ROUNDS`` full collections, each timed, in ms."""
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        gc.collect()
        times.append(1000 * (time.perf_counter() - start))
    return times


async def main() -> None:
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    device = resolve_device(settings)
    engine = build_engine(settings, device, settings.dlfp_config(device))
    await engine.start()
    try:
        tracked = len(gc.get_objects())
        before = _collections_ms()
        frozen = freeze_startup_heap()
        after = _collections_ms()
    finally:
        await engine.shutdown()
    result = {
        "device": device,
        "objects_tracked_after_start": tracked,
        "objects_frozen": frozen,
        "full_collection_ms_before": before,
        "full_collection_ms_after": after,
    }
    OUT.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"objects tracked once the engine had started: {tracked:,}; frozen: {frozen:,}")
    print("| full collection | median ms | min-max ms |")
    print("| --- | ---: | --- |")
    for name, times in (("before the freeze", before), ("after it", after)):
        print(f"| {name} | {statistics.median(times):.1f} | {min(times):.1f}-{max(times):.1f} |")


if __name__ == "__main__":
    asyncio.run(main())
