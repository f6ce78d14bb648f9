"""A SIMULATED monotonic clock: seconds that move only when its owner moves them.

What a replay of the engine loop (``bench/studies/dispatch_sim.py``), the in-process
scheduler benchmark (``bench/harness/overhead.py``) and the quick tier's tests hand the
controller instead of ``time.monotonic``: the step times come from a plant, and nothing
sleeps.
"""

from __future__ import annotations


class SimulatedClock:
    """A callable clock that reads ``now``, in seconds, until it is moved."""

    def __init__(self, start_s: float = 0.0) -> None:
        self.now = start_s

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
