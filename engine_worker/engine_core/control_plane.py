"""The engine core's end of the gateway's control plane: the ``dlfp_*`` methods.

The engine-core utility methods (``utilities``) call these on the scheduler between
steps: its state, new settings, a reset, the device timer's ring and the completed steps.
"""

from __future__ import annotations

from typing import Any

from vllm.logger import init_logger
from vllm.v1.core.sched.scheduler import Scheduler

from engine_worker.contract.dlfp_config import ControllerMode, DLFPConfig, Observation
from engine_worker.contract.step_ring import StepRing
from engine_worker.controller.params import CapParams

logger = init_logger(__name__)


# NOTE: subclasses Scheduler, as DLFPSchedulerMixin does, so that its super() reaches
# the vLLM scheduler next in the MRO. (The ignore is for mypy runs that skip vLLM.)
class ControlPlaneMixin(Scheduler):  # type: ignore[misc, unused-ignore]
    """The scheduler's state and settings, read and changed through the channel."""

    # Set by DLFPSchedulerMixin.__init__; typed here for the methods below.
    _step_ring: StepRing | None

    @property
    def dlfp_params(self) -> CapParams:
        """The settings in force: the controller's, the engine core's one live copy."""
        params: CapParams = self.dlfp_controller.params
        return params

    @property
    def dlfp_config(self) -> DLFPConfig:
        """The settings in force as the model the gateway reads."""
        return DLFPConfig.from_params(self.dlfp_params)

    def dlfp_get_state(self) -> dict[str, Any]:
        """Controller state plus the settings in force, as plain types."""
        state: dict[str, Any] = {
            **self.dlfp_controller.state.to_dict(),
            "config": self.dlfp_config.model_dump(mode="json"),
            "scheduler_cls": type(self).__name__,
            "async_scheduling": bool(self.scheduler_config.async_scheduling),
            # vLLM's max_concurrent_batches: > 1 = step_with_batch_queue, the
            # scheduler runs ahead of execution (pipeline stages or async scheduling).
            "batch_queue_size": int(self.vllm_config.max_concurrent_batches),
            "max_num_scheduled_tokens": self.max_num_scheduled_tokens,
        }
        return state | self._observation_in_force()

    def _observation_in_force(self) -> dict[str, Any]:
        # Without a ring no step can have a device time, before the first one completes.
        config = self.dlfp_params
        is_device = config.observation == Observation.DEVICE
        if self._step_ring is None and is_device and config.controller == ControllerMode.DLFP_CT:
            return {"observation_in_force": Observation.COMPLETION.value}
        return {}

    def dlfp_apply_config(self, config: dict[str, Any]) -> dict[str, Any]:
        """Validate a whole ``DLFPConfig`` dict, apply it, return the new state.

        Runs between steps on the engine-core thread, so the next ``schedule()``
        sees it; steps already in flight become stale for the controller.
        """
        new_config = DLFPConfig.model_validate(config)
        self.dlfp_controller.apply_params(new_config.to_params())
        self._warn_if_cap_exceeds_budget()
        logger.info("DLFP config applied: %s", new_config)
        return self.dlfp_get_state()

    def dlfp_reset(self, model: bool = False) -> dict[str, Any]:
        """Back to the starting cap and a fresh guard; with ``model``, an empty cost model
        and margin window too."""
        self.dlfp_controller.reset(model=model)
        self._num_held_steps.clear()
        logger.info("DLFP controller reset (model=%s)", model)
        return self.dlfp_get_state()

    def dlfp_attach_step_ring(self, name: str, num_slots: int) -> bool:
        """Read the workers' device times from the gateway's ring ``name`` (``step_ring``)."""
        if self._step_ring is not None:
            self._step_ring.close()
        self._step_ring = StepRing.attach(name, num_slots)
        self._has_warned_no_device_time = False
        logger.info("DLFP device step times from shared memory %s", name)
        return True

    def dlfp_get_steps(self, since_step: int) -> list[dict[str, Any]]:
        """Completed steps with ``step_index >= since_step``, oldest first."""
        return [r.to_dict() for r in self._dlfp_steps if r.step_index >= since_step and r.is_done]
