"""The start-up heap, frozen out of the garbage collector's reach.

The gateway's process holds every object its imports made (vLLM, torch, transformers,
FastAPI: about 640,000 on the CPU build). A collection of the oldest generation walks them
all, on the event loop, and every stream on the process waits for it: about 300 ms on an
AMD EPYC family 25 model 17 (``bench/results/startup-heap-zen4/run.sh``). Once the engine
has started, those objects live as long as the process, so they are moved to the
permanent generation (``gc.freeze``), which no collection walks; vLLM's own server does the
same once it has started.
"""

from __future__ import annotations

import gc
import logging
import time

logger = logging.getLogger("dlfp.gateway")


def freeze_startup_heap() -> int:
    """Collect what start-up left unreachable, then freeze every object still tracked;
    returns how many are frozen in all (``gc.get_freeze_count``)."""
    start = time.perf_counter()
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    logger.info(
        "start-up heap frozen out of the collector's reach",
        extra={
            "event": "startup_heap_frozen",
            "objects": frozen,
            "collect_s": round(time.perf_counter() - start, 4),
        },
    )
    return frozen
