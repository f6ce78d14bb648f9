"""The engine core's end of the gateway's channel: ``dlfp_*`` utility methods on vLLM's
``EngineCore`` that delegate to its scheduler.

vLLM's only request/response path from ``AsyncLLM`` to code in the engine-core
process is a utility call, which runs ``getattr(engine_core, name)(*args)``; vLLM has
no utility that reaches the scheduler, so these methods are added to ``EngineCore``:

- ``dlfp_get_state() -> dict``
- ``dlfp_apply_config(config: dict) -> dict`` (returns the new state)
- ``dlfp_get_steps(since_step: int) -> list[dict]``
- ``dlfp_reset(model: bool) -> dict`` (returns the new state)
- ``dlfp_attach_step_ring(name: str, num_slots: int) -> bool`` (the workers'
  device times, ``contract.step_ring``)

``engine_core.scheduler`` installs them on import, which vLLM does inside the
engine-core process when it resolves ``scheduler_cls``. The gateway's end is
``client.channel``; the names are in ``contract.engine_hooks``.

# NOTE: utility calls run on the engine-core thread *between* steps
# (``EngineCoreProc.run_busy_loop``: ``_process_input_queue`` handles them,
# then ``_process_engine_step`` runs ``step_fn``), never during ``schedule()``;
# a new config is seen by the next ``schedule()`` call without locking.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from engine_worker.contract.engine_hooks import (
    APPLY_CONFIG,
    ATTACH_STEP_RING,
    GET_STATE,
    GET_STEPS,
    RESET,
)


@runtime_checkable
class DLFPControls(Protocol):
    """What the engine-core methods need from the scheduler (``DLFPSchedulerMixin``)."""

    def dlfp_get_state(self) -> dict[str, Any]: ...
    def dlfp_apply_config(self, config: dict[str, Any]) -> dict[str, Any]: ...
    def dlfp_get_steps(self, since_step: int) -> list[dict[str, Any]]: ...
    def dlfp_reset(self, model: bool = False) -> dict[str, Any]: ...
    def dlfp_attach_step_ring(self, name: str, num_slots: int) -> bool: ...


def _controls(engine_core: Any) -> DLFPControls:
    scheduler = getattr(engine_core, "scheduler", None)
    if not isinstance(scheduler, DLFPControls):
        raise TypeError(
            f"the engine's scheduler is {type(scheduler).__name__}, not a DLFP scheduler; "
            "start vLLM with scheduler_cls=engine_hooks.scheduler_cls_name(...)"
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
