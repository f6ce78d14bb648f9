"""Background loop: copy the controller's live state from the engine core into gauges."""

from __future__ import annotations

import asyncio
import logging

from gateway.state import GatewayState

logger = logging.getLogger("dlfp.telemetry")


def _seconds(ms: object) -> float:
    return float(ms) / 1000 if isinstance(ms, int | float) else 0.0


async def poll_controller(state: GatewayState, interval_s: float = 0.5) -> None:
    """Runs until cancelled; a failed poll is logged once and retried."""
    failing = False
    while True:
        await asyncio.sleep(interval_s)
        if not state.engine.is_ready:
            continue
        try:
            live = await state.engine.get_dlfp_state()
        except Exception as exc:  # the engine may be between states; keep the gauges
            if not failing:
                logger.warning(
                    "controller poll failed", extra={"event": "poll_failed", "error": str(exc)}
                )
            failing = True
            continue
        failing = False
        m = state.metrics
        m.controller_cap.set(float(live.get("cap_tokens") or 0))
        m.controller_observation.set(_seconds(live.get("last_observation_ms")))
        m.controller_target.set(_seconds(live.get("target_ms")))
