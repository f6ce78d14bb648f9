"""The engine's control plane: the DLFP scheduler's state and settings, reached through
the channel, and the device timer's shared-memory ring, set up at start."""

from __future__ import annotations

import logging
from typing import Any

from engine_worker.contract.api import InvalidRequestError
from engine_worker.contract.dlfp_config import DLFPConfig
from engine_worker.contract.engine_hooks import INSTALL_TIMER_METHOD
from engine_worker.contract.step_ring import StepRing

logger = logging.getLogger("dlfp.engine")


class DLFPControlPlane:
    """``VLLMEngine``'s calls into the engine core and the workers beside requests."""

    _channel: Any
    _step_ring: StepRing | None

    def _require(self) -> Any:
        raise NotImplementedError

    async def _install_device_timer(self, llm: Any, channel: Any) -> None:
        """The ring of device step times (``step_ring``), its writers and its reader.

        The gateway process owns the segment: created here, unlinked at shutdown.
        """
        try:
            ring = self._step_ring = StepRing.create()
        except OSError as exc:  # no shared memory here (a /dev/shm too small, or none)
            logger.warning(
                "device step timing unavailable: observation device falls back to completion",
                extra={"event": "device_timer_unavailable", "reason": f"shared memory: {exc}"},
            )
            return
        try:
            writers = await llm.collective_rpc(
                INSTALL_TIMER_METHOD, args=(ring.name, ring.num_slots)
            )
        except Exception as exc:  # an executor that cannot reach the extension
            writers, reason = [], f"install failed: {exc}"
        else:
            reason = "no worker writes step times"
        if not any(writers):
            logger.warning(
                "device step timing unavailable: observation device falls back to completion",
                extra={"event": "device_timer_unavailable", "reason": reason},
            )
            self._close_step_ring()
            return
        await channel.attach_step_ring(ring.name, ring.num_slots)
        logger.info(
            "device step timing on",
            extra={"event": "device_timer", "shared_memory": ring.name, "slots": ring.num_slots},
        )

    def _close_step_ring(self) -> None:
        ring, self._step_ring = self._step_ring, None
        if ring is not None:
            ring.close()

    def _dlfp(self) -> Any:
        self._require()
        if self._channel is None:
            raise InvalidRequestError("this engine runs vLLM's own scheduler, not DLFP")
        return self._channel

    async def get_dlfp_state(self) -> dict[str, Any]:
        state: dict[str, Any] = await self._dlfp().get_state()
        return state

    async def apply_dlfp_config(self, config: DLFPConfig) -> dict[str, Any]:
        state: dict[str, Any] = await self._dlfp().apply_config(config)
        return state

    async def get_dlfp_steps(self, since_step: int) -> list[dict[str, Any]]:
        steps: list[dict[str, Any]] = await self._dlfp().get_steps(since_step)
        return steps

    async def reset_dlfp(self, *, model: bool = False) -> dict[str, Any]:
        state: dict[str, Any] = await self._dlfp().reset(model)
        return state
