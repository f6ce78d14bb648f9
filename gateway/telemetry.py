"""Copy the controller's live state from the engine core into the gateway's metrics.

``ControllerMirror.apply`` maps one state dict (``ControllerState.to_dict()``) onto the
metrics and needs no engine; ``poll_controller`` is the background loop that feeds it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import Counter

from engine_worker.contract.api import Engine
from gateway.metrics import CONTROLLER_PLANS, NO_CAP_TOKENS, GatewayMetrics

logger = logging.getLogger("dlfp.telemetry")


def _seconds(ms: object) -> float:
    return float(ms) / 1000 if isinstance(ms, int | float) else 0.0


def cap_gauge_value(cap_tokens: object) -> float:
    """-1 with no cap (mode ``off``, or nothing capped yet), 0 for a step that carried no
    prefill because none fitted, else the cap in tokens."""
    return float(cap_tokens) if isinstance(cap_tokens, int | float) else NO_CAP_TOKENS


def counter_increment(last: int | None, now: int) -> int:
    """What a counter mirroring an engine count adds at a poll: the growth since the last
    poll; the whole count on the first poll, and when the count went down (the engine or
    its controller started again from 0), as Prometheus reads a counter reset."""
    return now if last is None or now < last else now - last


def plan_gauge_values(plan: object) -> dict[str, float]:
    """``dlfp_controller_plan`` by label: 1 for the plan in force, 0 for the others."""
    in_force = "none" if plan is None else str(plan)
    return {name: float(name == in_force) for name in CONTROLLER_PLANS}


class ZeroPrefillShare:
    """The share of the deadline plan's steps that found no slack for one prefill token, or
    went at the floor (a floor for a TTFT deadline included), over the last ``polls`` polls
    (``num_zero_prefill_steps`` plus ``num_floor_steps``, over ``num_planned_steps``):
    admission's signal that the decodes leave no slack
    (``Admission.zero_prefill_share``). A poll with no planned step clears it: the signal is
    about the plan in force now."""

    def __init__(self, polls: int = 4) -> None:
        self._deltas: deque[tuple[int, int]] = deque(maxlen=polls)
        self._last: tuple[int, int] | None = None

    def update(self, live: Mapping[str, Any]) -> float:
        zero, planned = live.get("num_zero_prefill_steps"), live.get("num_planned_steps")
        if not isinstance(zero, int) or not isinstance(planned, int):
            return 0.0  # an engine that does not plan deadlines
        floor = live.get("num_floor_steps")
        zero += floor if isinstance(floor, int) else 0
        last = self._last
        self._last = (zero, planned)
        if last is None or zero < last[0] or planned <= last[1]:
            # NOTE: no planned step since the last poll (another controller, a reset, an
            # idle engine, a restart): no evidence of starvation now, so none is kept.
            self._deltas.clear()
            return 0.0
        self._deltas.append((zero - last[0], planned - last[1]))
        num_planned = sum(p for _, p in self._deltas)
        return sum(z for z, _ in self._deltas) / num_planned if num_planned else 0.0


class ControllerMirror:
    """The metrics side of the controller's state, one poll at a time.

    Gauges are set; the step counts feed Counters, which only go up, by
    ``counter_increment`` against the count seen at the previous poll.
    """

    def __init__(self, metrics: GatewayMetrics) -> None:
        self._metrics = metrics
        self._counters: dict[str, Counter] = {
            "num_zero_prefill_steps": metrics.controller_zero_prefill_steps,
            "num_floor_steps": metrics.controller_floor_steps,
            "num_planned_steps": metrics.controller_planned_steps,
            "num_boost_steps": metrics.controller_boost_steps,
            "num_knee_steps": metrics.controller_knee_steps,
            "num_paced_steps": metrics.controller_paced_steps,
            "num_ttft_overdue_steps": metrics.controller_ttft_overdue_steps,
            "num_deadline_steps": metrics.controller_deadline_steps,
            "num_deadline_misses": metrics.controller_deadline_misses,
        }
        self._last_counts: dict[str, int] = {}

    def apply(self, live: Mapping[str, Any]) -> None:
        m = self._metrics
        m.controller_cap.set(cap_gauge_value(live.get("cap_tokens")))
        m.controller_observation.set(_seconds(live.get("last_observation_ms")))
        set_controller_target(m, live.get("target_ms"))
        margin = live.get("margin")
        m.controller_margin.set(float(margin) if isinstance(margin, int | float) else 0.0)
        for name, value in plan_gauge_values(live.get("plan")).items():
            m.controller_plan.labels(plan=name).set(value)
        for key, counter in self._counters.items():
            now = live.get(key)
            if not isinstance(now, int):
                continue  # an engine that does not report it: keep the count where it is
            counter.inc(counter_increment(self._last_counts.get(key), now))
            self._last_counts[key] = now


async def poll_controller(
    engine: Engine,
    metrics: GatewayMetrics,
    interval_s: float = 0.5,
    on_zero_prefill_share: Callable[[float], None] | None = None,
) -> None:
    """Runs until cancelled; a failed poll is logged once and retried. Each poll also
    gives ``on_zero_prefill_share`` the share of recent planned steps with no prefill."""
    mirror = ControllerMirror(metrics)
    share = ZeroPrefillShare()
    failing = False
    while True:
        await asyncio.sleep(interval_s)
        if not engine.is_ready:
            continue
        try:
            live = await engine.get_dlfp_state()
        except Exception as exc:  # the engine may be between states; keep the gauges
            if not failing:
                logger.warning(
                    "controller poll failed", extra={"event": "poll_failed", "error": str(exc)}
                )
            failing = True
            continue
        failing = False
        mirror.apply(live)
        if on_zero_prefill_share is not None:
            on_zero_prefill_share(share.update(live))


def set_controller_target(metrics: GatewayMetrics, target_ms: object) -> None:
    """``dlfp_controller_target_seconds`` from a target in ms (0 when it is not a number:
    ``auto`` before the engine core has resolved it)."""
    metrics.controller_target.set(_seconds(target_ms))
