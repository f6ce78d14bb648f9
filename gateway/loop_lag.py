"""How late the event loop wakes a task that asked to sleep: the time every request on
this process waits behind work that holds the loop (``dlfp_event_loop_lag_seconds``)."""

from __future__ import annotations

import asyncio

from prometheus_client import Histogram

INTERVAL_S = 0.02
"""How often the loop is sampled."""


async def watch_loop_lag(histogram: Histogram, interval_s: float = INTERVAL_S) -> None:
    """Forever: sleep ``interval_s`` and record how much later than asked the loop woke."""
    loop = asyncio.get_running_loop()
    while True:
        start = loop.time()
        await asyncio.sleep(interval_s)
        histogram.observe(max(0.0, loop.time() - start - interval_s))
