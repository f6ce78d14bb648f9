"""The gateway's end of the one cross-process path to vLLM's engine-core process.

``AsyncLLM`` always runs the engine core in its own process and reaches it
over ZMQ. Its only request/response path to code in that process is a
*utility call*: ``AsyncMPClient.call_utility_async(name, *args)`` makes
``EngineCoreProc`` run ``getattr(engine_core, name)(*args)`` and send back the
result (msgpack: plain dicts, lists, str, numbers, None). The engine core's end,
``engine_core.utilities``, adds the ``dlfp_*`` methods to ``EngineCore``;
``DLFPChannel`` here wraps an ``AsyncLLM`` and calls them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from engine_worker.contract.dlfp_config import DLFPConfig
from engine_worker.contract.engine_hooks import (
    APPLY_CONFIG,
    ATTACH_STEP_RING,
    GET_STATE,
    GET_STEPS,
    RESET,
)

if TYPE_CHECKING:
    from vllm.v1.engine.async_llm import AsyncLLM

_T = TypeVar("_T")


class DLFPChannelError(RuntimeError):
    """A DLFP utility call failed in (or on the way to) the engine core."""


class _UtilityClient(Protocol):
    """The part of vLLM's ``AsyncMPClient`` used here (not on ``EngineCoreClient``)."""

    async def call_utility_async(self, method: str, *args: Any) -> Any: ...


class DLFPChannel:
    """Gateway-side handle on the DLFP scheduler inside the engine-core process.

    With data parallelism vLLM returns the first engine's answer only.
    """

    def __init__(self, engine: AsyncLLM) -> None:
        self._client = cast(_UtilityClient, engine.engine_core)

    async def get_state(self) -> dict[str, Any]:
        """Controller state and the ``DLFPConfig`` in force (``"config"``)."""
        return _expect(dict, await self._call(GET_STATE))

    async def apply_config(self, config: DLFPConfig) -> dict[str, Any]:
        """Apply a whole, already validated config; returns the new state."""
        return _expect(dict, await self._call(APPLY_CONFIG, config.model_dump(mode="json")))

    async def get_steps(self, since_step: int = 0) -> list[dict[str, Any]]:
        """Completed steps with ``step_index >= since_step`` still in the ring buffer."""
        return _expect(list, await self._call(GET_STEPS, since_step))

    async def reset(self, model: bool = False) -> dict[str, Any]:
        """Reset the controller (cap, guard); with ``model`` also the cost model and the
        deadline plan's margin window. Returns the new state."""
        return _expect(dict, await self._call(RESET, model))

    async def attach_step_ring(self, name: str, num_slots: int) -> bool:
        """Have the scheduler read the workers' device times from the ring ``name``."""
        return _expect(bool, await self._call(ATTACH_STEP_RING, name, num_slots))

    async def _call(self, method: str, *args: Any) -> Any:
        try:
            return await self._client.call_utility_async(method, *args)
        except Exception as exc:  # vLLM raises a bare Exception(failure_message)
            raise DLFPChannelError(f"{method} failed: {exc}") from exc


def _expect(kind: type[_T], value: object) -> _T:
    if not isinstance(value, kind):
        raise DLFPChannelError(f"expected {kind.__name__}, got {type(value).__name__}")
    return value
