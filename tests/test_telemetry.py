"""The controller's state as metrics: counters by deltas, the plan, the margin and the cap."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import pytest

from gateway.metrics import GatewayMetrics, build_metrics
from gateway.telemetry import (
    ControllerMirror,
    ZeroPrefillShare,
    cap_gauge_value,
    counter_increment,
    plan_gauge_values,
    poll_controller,
)
from tests.fakes import FakeEngine
from tests.http_helpers import fake_client

COUNTERS = {
    "num_zero_prefill_steps": "dlfp_controller_zero_prefill_steps_total",
    "num_floor_steps": "dlfp_controller_floor_steps_total",
    "num_planned_steps": "dlfp_controller_planned_steps_total",
    "num_boost_steps": "dlfp_controller_boost_steps_total",
    "num_knee_steps": "dlfp_controller_knee_steps_total",
    "num_paced_steps": "dlfp_controller_paced_steps_total",
    "num_ttft_overdue_steps": "dlfp_controller_ttft_overdue_steps_total",
    "num_deadline_steps": "dlfp_controller_deadline_steps_total",
    "num_deadline_misses": "dlfp_controller_deadline_misses_total",
}


def value(metrics: GatewayMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


@pytest.mark.parametrize(
    ("last", "now", "increment"),
    [(None, 5, 5), (3, 7, 4), (4, 4, 0), (7, 2, 2), (7, 0, 0)],
)
def test_counter_increment_is_the_growth_or_the_count_after_a_restart(
    last: int | None, now: int, increment: int
) -> None:
    assert counter_increment(last, now) == increment


@pytest.mark.parametrize(("cap", "expected"), [(None, -1.0), (0, 0.0), (256, 256.0)])
def test_cap_gauge_tells_no_cap_from_a_zero_prefill_step(cap: int | None, expected: float) -> None:
    assert cap_gauge_value(cap) == expected
    metrics = build_metrics()
    ControllerMirror(metrics).apply({"cap_tokens": cap})
    assert value(metrics, "dlfp_controller_cap_tokens") == expected


def test_cap_gauge_reads_no_cap_before_the_first_poll() -> None:
    assert value(build_metrics(), "dlfp_controller_cap_tokens") == -1.0


@pytest.mark.parametrize(
    ("plan", "in_force"), [("deadline", "deadline"), ("target", "target"), (None, "none")]
)
def test_plan_gauge_is_1_for_the_plan_in_force_only(plan: str | None, in_force: str) -> None:
    assert plan_gauge_values(plan) == {
        name: float(name == in_force) for name in ("deadline", "target", "none")
    }
    metrics = build_metrics()
    mirror = ControllerMirror(metrics)
    mirror.apply({"plan": "target" if plan != "target" else "deadline"})
    mirror.apply({"plan": plan})
    for name in ("deadline", "target", "none"):
        expected = 1.0 if name == in_force else 0.0
        assert value(metrics, "dlfp_controller_plan", plan=name) == expected, name


def test_every_plan_label_is_exported_before_the_first_poll() -> None:
    metrics = build_metrics()
    for name in ("deadline", "target", "none"):
        assert value(metrics, "dlfp_controller_plan", plan=name) == 0.0, name


def test_margin_gauge_is_the_margin_and_0_without_a_deadline_plan() -> None:
    metrics = build_metrics()
    mirror = ControllerMirror(metrics)
    mirror.apply({"plan": "deadline", "margin": 1.25})
    assert value(metrics, "dlfp_controller_margin") == 1.25
    mirror.apply({"plan": "target", "margin": None})
    assert value(metrics, "dlfp_controller_margin") == 0.0


@pytest.mark.parametrize("key", sorted(COUNTERS))
def test_step_counters_grow_by_deltas_and_rebase_after_a_restart(key: str) -> None:
    metrics = build_metrics()
    mirror = ControllerMirror(metrics)
    totals = []
    # 3, then 5 (+2), then the engine restarts and has counted 2 (+2), then 4 (+2), 4 (+0).
    for count in (3, 5, 2, 4, 4):
        mirror.apply({key: count})
        totals.append(value(metrics, COUNTERS[key]))
    assert totals == [3.0, 5.0, 7.0, 9.0, 9.0]
    others = [value(metrics, name) for k, name in COUNTERS.items() if k != key]
    assert others == [0.0] * (len(COUNTERS) - 1)


def test_a_state_without_the_counts_leaves_the_counters_alone() -> None:
    metrics = build_metrics()
    mirror = ControllerMirror(metrics)
    mirror.apply({"num_deadline_steps": 4})
    mirror.apply({"cap_tokens": 64})
    mirror.apply({"num_deadline_steps": 6})
    assert value(metrics, "dlfp_controller_deadline_steps_total") == 6.0


async def _until(done: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not done():
            await asyncio.sleep(0.01)


async def test_poller_copies_the_engines_state_into_the_exposition() -> None:
    engine = FakeEngine()
    engine.dlfp_state_overrides = {
        "cap_tokens": 0,
        "plan": "deadline",
        "margin": 1.5,
        "num_zero_prefill_steps": 7,
        "num_ttft_overdue_steps": 1,
        "num_deadline_steps": 40,
        "num_deadline_misses": 3,
        "num_planned_steps": 50,
        "num_paced_steps": 5,
    }
    async with fake_client(engine):
        # Metrics of its own: the app's poller feeds the app's metrics at the same time.
        metrics = build_metrics()
        poller = asyncio.create_task(poll_controller(engine, metrics, interval_s=0.01))
        try:
            await _until(lambda: value(metrics, "dlfp_controller_deadline_steps_total") == 40)
            assert value(metrics, "dlfp_controller_cap_tokens") == 0.0
            # A restarted engine: no plan, no cap, and one miss counted since.
            engine.dlfp_state_overrides |= {"cap_tokens": None, "plan": None, "margin": None}
            engine.dlfp_state_overrides |= {"num_deadline_misses": 1}
            await _until(lambda: value(metrics, "dlfp_controller_margin") == 0)
            await asyncio.sleep(0.05)  # a few more polls of the same state add nothing
        finally:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
    lines = set(metrics.exposition(include_engine=False).decode().splitlines())
    for line in (
        "dlfp_controller_cap_tokens -1.0",
        'dlfp_controller_plan{plan="none"} 1.0',
        'dlfp_controller_plan{plan="deadline"} 0.0',
        "dlfp_controller_margin 0.0",
        "dlfp_controller_zero_prefill_steps_total 7.0",
        "dlfp_controller_ttft_overdue_steps_total 1.0",
        "dlfp_controller_deadline_steps_total 40.0",
        "dlfp_controller_deadline_misses_total 4.0",
        "dlfp_controller_planned_steps_total 50.0",
        "dlfp_controller_paced_steps_total 5.0",
    ):
        assert line in lines, line


def test_zero_prefill_share_is_over_the_latest_polls_and_cleared_without_planned_steps() -> None:
    share = ZeroPrefillShare(polls=2)
    assert share.update({"num_zero_prefill_steps": 5, "num_planned_steps": 10}) == 0.0
    assert share.update({"num_zero_prefill_steps": 13, "num_planned_steps": 20}) == 0.8
    assert share.update({"num_zero_prefill_steps": 13, "num_planned_steps": 30}) == 0.4
    assert share.update({"num_zero_prefill_steps": 13, "num_planned_steps": 40}) == 0.0
    assert share.update({"num_zero_prefill_steps": 20, "num_planned_steps": 50}) == 0.35
    # Another controller (nothing planned): the old starvation no longer counts.
    assert share.update({"num_zero_prefill_steps": 20, "num_planned_steps": 50}) == 0.0
    assert share.update({"num_zero_prefill_steps": 30, "num_planned_steps": 60}) == 1.0
    assert share.update({"num_zero_prefill_steps": 0, "num_planned_steps": 1}) == 0.0
    assert share.update({}) == 0.0
