"""The gateway's one worker extension: methods the engine calls on every worker at start.

vLLM appends the class named by ``parallel_config.worker_extension_cls`` to its
worker's bases and reaches its methods through ``collective_rpc`` (one call, run
by every worker). It serves three purposes:

- ``dlfp_allocate_intermediate_tensors``: the receive buffer a later pipeline
  stage needs on the CPU backend (``cpu_pipeline``), called only with stages;
- ``dlfp_install_device_timer``: the device timer of each step (``device_timer``),
  which writes to the gateway's shared-memory ring (``step_ring``), called always;
- ``dlfp_guard_seeded_sampling``: keeps a seeded request's prefill in chunks from
  failing a CPU worker (``seeded_sampling``), called on the CPU.

The engine installs it unless the operator named an extension of their own; then
none runs (device timing is unavailable and ``observation: device`` falls
back to ``completion``). Its path and the names of its methods, as the gateway
calls them, are in ``contract.engine_hooks``.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("dlfp.worker")


class DLFPWorkerExtension:
    """Mixed into vLLM's worker class (``parallel_config.worker_extension_cls``)."""

    model_runner: Any
    vllm_config: Any

    def dlfp_allocate_intermediate_tensors(self) -> bool:
        """Make the receive buffer of a later stage; True if one was made."""
        from engine_worker.worker.cpu_pipeline import allocate_intermediate_tensors

        return allocate_intermediate_tensors(self.model_runner)

    def dlfp_install_device_timer(self, ring_name: str, num_slots: int) -> bool:
        """Time this worker's steps into the ring; True if this worker writes them.

        Only vLLM's output rank writes (``device_timer``): the first tensor-parallel
        rank of the last pipeline stage. None writes with data parallelism above 1.
        """
        from vllm.distributed.parallel_state import get_pp_group, get_tp_group

        from engine_worker.contract.step_ring import StepRing
        from engine_worker.worker.device_timer import install, refuses_data_parallel

        if not get_pp_group().is_last_rank or get_tp_group().rank_in_group != 0:
            return False
        parallel = self.vllm_config.parallel_config
        if refuses_data_parallel(parallel.data_parallel_size):
            if parallel.data_parallel_rank == 0:  # one line, not one per engine
                logger.warning(
                    "device step timing refused with data_parallel_size %d > 1 (the "
                    "engines' step indices would collide in one ring): observation "
                    "device falls back to completion",
                    parallel.data_parallel_size,
                )
            return False
        ring = StepRing.attach(ring_name, num_slots)
        device = getattr(self.model_runner, "device", None)
        install(self, ring, is_cuda=getattr(device, "type", "cpu") == "cuda")
        return True

    def dlfp_guard_seeded_sampling(self) -> None:
        """Guard this worker's seeded generators through discarded samples (CPU only)."""
        from engine_worker.worker.seeded_sampling import install

        install(self.model_runner)
