"""A FAKE monotonic clock for the quick tier: seconds that move only when a test says so."""

from __future__ import annotations


class FakeClock:
    def __init__(self, start_s: float = 0.0) -> None:
        self.now = start_s

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
