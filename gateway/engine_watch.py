"""Notices a hung engine: requests in it, and no engine output for any of them.

A dead engine core is visible (its process is gone); a hung one is not: its
process lives, ``/ready`` would stay 200 and streams would send keep-alives
forever. ``EngineWatch`` counts the requests in the engine and the time of the last
output of any of them (or of the first submission after an idle spell); past
``stall_s`` without output the engine counts as hung.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

logger = logging.getLogger("dlfp.gateway")


class EngineWatch:
    def __init__(self, stall_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stall_s = stall_s
        self._clock = clock
        self.num_in_engine = 0
        self._progress_s = clock()

    def submitted(self) -> None:
        if self.num_in_engine == 0:
            self._progress_s = self._clock()  # an idle engine owes no output
        self.num_in_engine += 1

    def output(self) -> None:
        self._progress_s = self._clock()

    def finished(self) -> None:
        self.num_in_engine = max(0, self.num_in_engine - 1)

    def stalled_s(self) -> float:
        """Seconds without output while requests are in the engine (0 when idle)."""
        return self._clock() - self._progress_s if self.num_in_engine else 0.0

    def is_hung(self) -> bool:
        return self.stalled_s() >= self.stall_s


async def watch_engine(
    watch: EngineWatch, on_hung: Callable[[str], None], interval_s: float = 1.0
) -> None:
    """Runs until cancelled; calls ``on_hung`` once, when the engine first counts as hung."""
    while True:
        await asyncio.sleep(min(interval_s, watch.stall_s / 4))
        if watch.is_hung():
            message = (
                f"the engine is hung: {watch.num_in_engine} requests and no output "
                f"for {watch.stalled_s():.0f} s"
            )
            logger.error(
                "engine hung",
                extra={
                    "event": "engine_hung",
                    "num_in_engine": watch.num_in_engine,
                    "stalled_s": round(watch.stalled_s(), 1),
                },
            )
            on_hung(message)
            return
