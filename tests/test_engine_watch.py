"""The hung-engine watch against a fake clock (quick tier)."""

from __future__ import annotations

from gateway.engine_watch import EngineWatch
from tests.fake_clock import FakeClock


def test_hung_only_while_a_request_waits_without_output() -> None:
    clock = FakeClock(100.0)
    watch = EngineWatch(stall_s=300, clock=clock)
    clock.now += 1000  # idle for long: no request waits, nothing is owed
    assert not watch.is_hung()
    watch.waiting()
    clock.now += 299
    assert not watch.is_hung()
    watch.done_waiting(got_output=True)
    watch.waiting()  # the next output is awaited from now
    clock.now += 299
    assert not watch.is_hung()
    clock.now += 1
    assert watch.is_hung() and watch.stalled_s() == 300


def test_a_slow_reader_is_not_a_hang() -> None:
    clock = FakeClock(100.0)
    watch = EngineWatch(stall_s=300, clock=clock)
    watch.waiting()
    watch.done_waiting(got_output=True)  # the output is out; its client reads slowly
    clock.now += 1000
    assert not watch.is_hung()
    watch.waiting()  # another request starts waiting: the clock starts now
    clock.now += 10
    assert not watch.is_hung()
