"""``observation: device`` in vLLM's real ``Scheduler`` (built directly, no engine process):
each ``SchedulerOutput`` carries its step index, through pickling too, and the scheduler
reads the device time a fake worker wrote under it."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator

import pytest
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler

from engine_worker.contract.dlfp_config import ControllerMode, DLFPConfig, Observation
from engine_worker.contract.step_ring import STEP_INDEX_ATTR, StepRing
from engine_worker.engine_core.scheduler import DLFPScheduler, DLFPSchedulerMixin
from tests.scheduler_helpers import make_request, run_step

pytestmark = pytest.mark.engine

DEVICE = DLFPConfig(controller=ControllerMode.DLFP_CT, observation=Observation.DEVICE)


@pytest.fixture
def ring() -> Iterator[StepRing]:
    created = StepRing.create(num_slots=64)
    yield created
    created.close()


def step(scheduler: Scheduler, ring: StepRing | None, device_s: float | None) -> SchedulerOutput:
    """A synchronous step whose fake worker receives a pickled copy, as vLLM's
    multiprocessing executor sends it, and writes ``device_s`` under its index."""

    def executed(output: SchedulerOutput) -> None:
        sent = pickle.loads(pickle.dumps(output))
        if ring is not None and device_s is not None:
            ring.write(getattr(sent, STEP_INDEX_ATTR), device_s)

    return run_step(scheduler, executed)


def test_each_output_carries_its_step_index(build: Callable[..., Scheduler]) -> None:
    scheduler = build(DLFPScheduler, DEVICE)
    scheduler.add_request(make_request("a", 40, max_tokens=4))
    outputs = [step(scheduler, None, None) for _ in range(3)]
    assert [getattr(o, STEP_INDEX_ATTR) for o in outputs] == [0, 1, 2]


def test_device_times_are_read_back_and_fed_back(
    build: Callable[..., Scheduler], ring: StepRing
) -> None:
    scheduler = build(DLFPScheduler, DEVICE)
    assert isinstance(scheduler, DLFPSchedulerMixin)
    assert scheduler.dlfp_get_state()["observation_in_force"] == "completion"  # no ring yet
    assert scheduler.dlfp_attach_step_ring(ring.name, ring.num_slots) is True
    scheduler.add_request(make_request("a", 40, max_tokens=8))
    for index in range(4):
        step(scheduler, ring, 0.010 * (index + 1))
    step(scheduler, ring, None)  # a slot never written: completion for that step
    steps = scheduler.dlfp_get_steps(0)
    assert [s["device_ms"] for s in steps] == pytest.approx([10.0, 20.0, 30.0, 40.0, None])
    assert all(s["observation_ms"] == s["device_ms"] for s in steps[:4])
    assert steps[4]["observation_ms"] == steps[4]["completion_interval_ms"]
    state = scheduler.dlfp_get_state()
    assert state["observation_in_force"] == "completion"
    step(scheduler, ring, 0.005)
    assert scheduler.dlfp_get_state()["observation_in_force"] == "device"
