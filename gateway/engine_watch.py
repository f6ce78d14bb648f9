"""Notices a hung engine: requests waiting on it, and no engine output for any of them.

A dead engine core is visible (its process is gone); a hung one is not: its
process lives, ``/ready`` would stay 200 and streams would send keep-alives
forever. ``EngineWatch`` counts the requests waiting for their next engine output
and the time of the last output of any request (or of the first wait after an idle
spell); past ``stall_s`` without output the engine counts as hung.

NOTE: a request counts only while it awaits the engine. A stream whose client reads
slowly is held back by the client, not by the engine, and must not look like a hang.
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
        self.num_waiting = 0
        self._progress_s = clock()

    def waiting(self) -> None:
        """A request starts awaiting its next engine output."""
        if self.num_waiting == 0:
            self._progress_s = self._clock()  # an engine nobody waits on owes no output
        self.num_waiting += 1

    def done_waiting(self, got_output: bool) -> None:
        self.num_waiting = max(0, self.num_waiting - 1)
        if got_output:
            self._progress_s = self._clock()

    def stalled_s(self) -> float:
        """Seconds without output while requests wait on the engine (0 when none does)."""
        return self._clock() - self._progress_s if self.num_waiting else 0.0

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
                f"the engine is hung: {watch.num_waiting} requests wait and no output came "
                f"for {watch.stalled_s():.0f} s"
            )
            logger.error(
                "engine hung",
                extra={
                    "event": "engine_hung",
                    "num_waiting": watch.num_waiting,
                    "stalled_s": round(watch.stalled_s(), 1),
                },
            )
            on_hung(message)
            return
