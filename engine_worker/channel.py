"""The one cross-process path between the gateway and vLLM's engine-core process.

``AsyncLLM`` always runs the engine core in its own process and reaches it
over ZMQ. Its only request/response path to code in that process is a
*utility call*: ``AsyncMPClient.call_utility_async(name, *args)`` makes
``EngineCoreProc`` run ``getattr(engine_core, name)(*args)`` and send back the
result (msgpack: plain dicts, lists, str, numbers, None). vLLM has no utility
that reaches the scheduler, so the engine-core side of this module adds
methods to ``EngineCore`` that delegate to ``engine_core.scheduler``:

- ``dlfp_get_state() -> dict``
- ``dlfp_apply_config(config: dict) -> dict`` (returns the new state)
- ``dlfp_get_steps(since_step: int) -> list[dict]``
- ``dlfp_reset(model: bool) -> dict`` (returns the new state)
- ``dlfp_attach_step_ring(name: str, num_slots: int) -> bool`` (the workers'
  device times, ``step_ring``)

``engine_worker.scheduler`` installs them on import, which vLLM does inside
the engine-core process when it resolves ``scheduler_cls``.

# NOTE: utility calls run on the engine-core thread *between* steps
# (``EngineCoreProc.run_busy_loop``: ``_process_input_queue`` handles them,
# then ``_process_engine_step`` runs ``step_fn``), never during ``schedule()``;
# a new config is seen by the next ``schedule()`` call without locking.

The client side, ``DLFPChannel``, wraps an ``AsyncLLM`` for the gateway.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast, runtime_checkable

from engine_worker.dlfp_config import DLFPConfig

if TYPE_CHECKING:
    from vllm.v1.engine.async_llm import AsyncLLM

_T = TypeVar("_T")

GET_STATE = "dlfp_get_state"
APPLY_CONFIG = "dlfp_apply_config"
GET_STEPS = "dlfp_get_steps"
RESET = "dlfp_reset"
ATTACH_STEP_RING = "dlfp_attach_step_ring"


class DLFPChannelError(RuntimeError):
    """A DLFP utility call failed in (or on the way to) the engine core."""


@runtime_checkable
class DLFPControls(Protocol):
    """What the engine-core methods need from the scheduler (``DLFPSchedulerMixin``)."""

    def dlfp_get_state(self) -> dict[str, Any]: ...
    def dlfp_apply_config(self, config: dict[str, Any]) -> dict[str, Any]: ...
    def dlfp_get_steps(self, since_step: int) -> list[dict[str, Any]]: ...
    def dlfp_reset(self, model: bool = False) -> dict[str, Any]: ...
    def dlfp_attach_step_ring(self, name: str, num_slots: int) -> bool: ...


# --- engine-core side -------------------------------------------------------


def _controls(engine_core: Any) -> DLFPControls:
    scheduler = getattr(engine_core, "scheduler", None)
    if not isinstance(scheduler, DLFPControls):
        raise TypeError(
            f"the engine's scheduler is {type(scheduler).__name__}, not a DLFP scheduler; "
            "start vLLM with scheduler_cls=engine_worker.scheduler.scheduler_cls_name(...)"
        )
    return scheduler


# NOTE: explicit positional parameters: EngineCoreProc._convert_msgspec_args
# asserts len(args) <= number of parameters. The string annotations (future
# import) are never classes, so vLLM passes the decoded args through as-is.
def _engine_core_get_state(self: Any) -> dict[str, Any]:
    return _controls(self).dlfp_get_state()


def _engine_core_apply_config(self: Any, config: dict[str, Any]) -> dict[str, Any]:
    return _controls(self).dlfp_apply_config(config)


def _engine_core_get_steps(self: Any, since_step: int) -> list[dict[str, Any]]:
    return _controls(self).dlfp_get_steps(int(since_step))


def _engine_core_reset(self: Any, model: bool = False) -> dict[str, Any]:
    return _controls(self).dlfp_reset(model=bool(model))


def _engine_core_attach_step_ring(self: Any, name: str, num_slots: int) -> bool:
    return _controls(self).dlfp_attach_step_ring(str(name), int(num_slots))


def install_engine_core_utilities() -> None:
    """Add the ``dlfp_*`` utility methods to vLLM's ``EngineCore`` (idempotent)."""
    from vllm.v1.engine.core import EngineCore

    setattr(EngineCore, GET_STATE, _engine_core_get_state)
    setattr(EngineCore, APPLY_CONFIG, _engine_core_apply_config)
    setattr(EngineCore, GET_STEPS, _engine_core_get_steps)
    setattr(EngineCore, RESET, _engine_core_reset)
    setattr(EngineCore, ATTACH_STEP_RING, _engine_core_attach_step_ring)


# --- gateway side -----------------------------------------------------------


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
