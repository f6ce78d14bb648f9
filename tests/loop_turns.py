"""Waiting on the event loop for other tasks, not sleeping and hoping: by loop turns for a
state the loop's own tasks reach (``until``), by a polled guard that times nothing for one
a thread or a signal reaches (``until_polled``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(done: Callable[[], bool], max_turns: int = 1000) -> None:
    """Yield to the loop until ``done()`` holds; fail after ``max_turns`` turns."""
    for _ in range(max_turns):
        if done():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"not reached within {max_turns} loop turns")


async def until_polled(done: Callable[[], bool], timeout_s: float = 30.0) -> None:
    """Yield to the loop until ``done()`` holds, for a state another thread or a signal
    reaches (a tokenizer in the loop's executor, a drain): loop turns cannot bound what the
    OS has not yet scheduled, so this polls, failing only past a long guard that times
    nothing."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not done():
        if loop.time() > deadline:
            raise AssertionError(f"not reached within {timeout_s} s")
        await asyncio.sleep(0.005)
