"""The quick tier's FAKE monotonic clock: ``bench.lib.sim_clock.SimulatedClock``, under the
name the tests give a fake. Its seconds move only when a test says so."""

from __future__ import annotations

from bench.lib.sim_clock import SimulatedClock as FakeClock

__all__ = ["FakeClock"]
