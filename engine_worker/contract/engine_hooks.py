"""Where the gateway plugs into vLLM's other processes: class paths and call names.

vLLM takes the scheduler and the worker extension as dotted paths and resolves them
in the process that runs them (``scheduler_cls`` in the engine core,
``worker_extension_cls`` in each worker), so the gateway names them here as strings
and never imports ``engine_core`` or ``worker``. The names of the methods it calls
there, through utility calls (``client.channel``) and ``collective_rpc``
(``client.engine``), live beside them, one spelling for both ends.
"""

from __future__ import annotations

SCHEDULER_CLS = "engine_worker.engine_core.scheduler.DLFPScheduler"
"""DLFP over vLLM's synchronous ``Scheduler`` (CPU, or async scheduling off)."""
ASYNC_SCHEDULER_CLS = "engine_worker.engine_core.scheduler.DLFPAsyncScheduler"
"""DLFP over vLLM's ``AsyncScheduler`` (GPU with async scheduling)."""

WORKER_EXTENSION_CLS = "engine_worker.worker.worker_extension.DLFPWorkerExtension"
"""The gateway's one worker extension."""
WORKER_EXTENSION_ALIASES = frozenset(
    {WORKER_EXTENSION_CLS, "engine_worker.worker_extension.DLFPWorkerExtension"}
)
"""Paths an operator may give for that same extension (the second one is older)."""

# Engine-core utility methods (``engine_core.utilities``), reached by ``client.channel``.
GET_STATE = "dlfp_get_state"
APPLY_CONFIG = "dlfp_apply_config"
GET_STEPS = "dlfp_get_steps"
RESET = "dlfp_reset"
ATTACH_STEP_RING = "dlfp_attach_step_ring"

# Worker methods (``worker.worker_extension``), reached by ``collective_rpc``.
ALLOCATE_METHOD = "dlfp_allocate_intermediate_tensors"
INSTALL_TIMER_METHOD = "dlfp_install_device_timer"
GUARD_SEEDED_METHOD = "dlfp_guard_seeded_sampling"


def scheduler_cls_name(async_scheduling: bool | None) -> str:
    """``scheduler_cls`` for a ``VllmConfig`` whose ``async_scheduling`` is final."""
    return ASYNC_SCHEDULER_CLS if async_scheduling else SCHEDULER_CLS
