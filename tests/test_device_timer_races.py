"""The CUDA timer's races, on a FAKE event stream: each step's device time is in the
ring before its output reaches the scheduler, and no wait falls on the step in flight."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from engine_worker.contract.step_ring import STEP_INDEX_ATTR, StepRing
from engine_worker.worker.device_timer import (
    CudaEventClock,
    DeviceStepTimer,
    refuses_data_parallel,
)
from tests.fake_clock import FakeClock


class FakeStream:
    """A FAKE CUDA stream: events complete in record order, only when waited for."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.events: list[FakeEvent] = []
        self.busy_until_s = 0.0
        """When the work enqueued so far ends (0: the device is idle)."""

    def enqueue(self, kernel_s: float) -> None:
        self.busy_until_s = max(self.busy_until_s, self.clock()) + kernel_s

    def complete_through(self, event: FakeEvent) -> None:
        for recorded in self.events[: self.events.index(event) + 1]:
            recorded.is_complete = True


class FakeEvent:
    """A FAKE ``torch.cuda.Event``: ``query()`` is False until it is synchronised."""

    def __init__(self, stream: FakeStream) -> None:
        self.stream = stream
        self.time_s = max(stream.clock(), stream.busy_until_s)  # reached after the work before it
        self.is_complete = False
        self.num_syncs = 0
        stream.events.append(self)

    def query(self) -> bool:
        return self.is_complete

    def synchronize(self) -> None:
        self.num_syncs += 1
        self.stream.complete_through(self)

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.is_complete and end.is_complete, "CUDA raises on an incomplete event"
        return (end.time_s - self.time_s) * 1000.0


class FakeEventClock(CudaEventClock):
    """The real ``CudaEventClock`` reading, with marks on a FAKE stream."""

    def __init__(self, stream: FakeStream) -> None:
        self.stream = stream

    def mark(self) -> FakeEvent:
        return FakeEvent(self.stream)


class FakeAsyncOutput:
    """Model Runner V2's ``AsyncOutput``: ``get_output`` waits for the copy only."""

    def get_output(self) -> str:
        return "output"


class FakeSchedulerOutput:
    def __init__(self, step_index: int, num_tokens: int) -> None:
        self.total_num_scheduled_tokens = num_tokens
        setattr(self, STEP_INDEX_ATTR, step_index)


class FakeCudaWorker:
    def __init__(self, clock: FakeClock, *, is_async: bool) -> None:
        self.clock = clock
        self.is_async = is_async

    def execute_model(self, scheduler_output: FakeSchedulerOutput) -> Any:
        self.clock.advance(0.030)
        return None if scheduler_output.total_num_scheduled_tokens else "empty output"

    def sample_tokens(self, grammar_output: object) -> Any:
        self.clock.advance(0.010)
        return FakeAsyncOutput() if self.is_async else "output"


@pytest.fixture
def ring() -> Iterator[StepRing]:
    created = StepRing.create(num_slots=16)
    yield created
    created.close()


def timed(ring: StepRing, *, is_async: bool) -> tuple[FakeCudaWorker, FakeStream]:
    clock = FakeClock(100.0)
    stream = FakeStream(clock)
    worker = FakeCudaWorker(clock, is_async=is_async)
    timer = DeviceStepTimer(ring, FakeEventClock(stream))
    worker.execute_model = timer.wrap_execute_model(worker.execute_model)  # type: ignore[method-assign]
    worker.sample_tokens = timer.wrap_sample_tokens(worker.sample_tokens)  # type: ignore[method-assign]
    return worker, stream


def launch(worker: FakeCudaWorker, step_index: int, num_tokens: int = 64) -> Any:
    output = worker.execute_model(FakeSchedulerOutput(step_index, num_tokens))
    return output if output is not None else worker.sample_tokens(None)


def test_async_step_is_written_when_its_output_is_handed_back(ring: StepRing) -> None:
    worker, _ = timed(ring, is_async=True)
    outputs = [launch(worker, 0)]
    for index in range(1, 6):
        outputs.append(launch(worker, index))  # the next step is in flight (overlap)
        assert outputs[index - 1].get_output() == "output"
        assert ring.read(index - 1) == pytest.approx(0.040)
        assert ring.read(index) is None
    outputs[-1].get_output()
    assert [ring.read(index) for index in range(6)] == [pytest.approx(0.040)] * 6


def test_handing_back_a_step_never_waits_on_the_step_in_flight(ring: StepRing) -> None:
    worker, stream = timed(ring, is_async=True)
    first = launch(worker, 0)
    launch(worker, 1)
    first.get_output()
    start_1, end_1 = stream.events[4], stream.events[-1]  # four marks a step
    assert (start_1.num_syncs, end_1.num_syncs, end_1.is_complete) == (0, 0, False)


def test_sync_step_is_written_before_sample_tokens_returns(ring: StepRing) -> None:
    worker, _ = timed(ring, is_async=False)
    for index in range(3):
        assert launch(worker, index) == "output"
        assert ring.read(index) == pytest.approx(0.040)


def test_a_zero_token_step_never_waits_on_the_step_in_flight(ring: StepRing) -> None:
    worker, stream = timed(ring, is_async=True)
    in_flight = launch(worker, 0)
    assert launch(worker, 1, num_tokens=0) == "empty output"
    assert all(event.num_syncs == 0 for event in stream.events)
    assert ring.read(0) is None and ring.read(1) is None
    in_flight.get_output()  # waits for step 0 only
    assert ring.read(0) == pytest.approx(0.040)
    stream.complete_through(stream.events[-1])  # the empty step's events complete later
    launch(worker, 2)  # and the next call writes them
    assert ring.read(1) == pytest.approx(0.030)


def test_a_zero_token_step_on_the_sync_path_does_not_wait(ring: StepRing) -> None:
    worker, stream = timed(ring, is_async=False)
    launch(worker, 0)
    launch(worker, 1, num_tokens=0)
    assert stream.events[-1].num_syncs == 0


@pytest.mark.parametrize(("data_parallel_size", "is_refused"), [(1, False), (2, True), (4, True)])
def test_device_timing_is_refused_with_data_parallelism(
    data_parallel_size: int, is_refused: bool
) -> None:
    assert refuses_data_parallel(data_parallel_size) is is_refused


class FakeStepTiming:
    """Model Runner V2's ``step_timing``: ``forward_start`` is called at the forward's launch."""

    def forward_start(self) -> None:
        pass


class FakeModelRunnerV2Worker:
    """A step as Model Runner V2 runs it on a FAKE stream: the host prepares the inputs
    while the device idles, launches the forward, and the engine core computes a
    structured-output bitmask between the two calls."""

    PREPARE_S, FORWARD_S, BITMASK_S, SAMPLE_S = 0.020, 0.015, 0.050, 0.005

    def __init__(self, clock: FakeClock, stream: FakeStream) -> None:
        self.clock, self.stream = clock, stream
        self.model_runner = type("Runner", (), {"step_timing": FakeStepTiming()})()

    def execute_model(self, scheduler_output: FakeSchedulerOutput) -> Any:
        self.clock.advance(self.PREPARE_S)
        self.model_runner.step_timing.forward_start()
        self.stream.enqueue(self.FORWARD_S)
        return None

    def sample_tokens(self, grammar_output: object) -> Any:
        self.stream.enqueue(self.SAMPLE_S)
        return "output"


def test_device_time_holds_the_devices_work_and_not_the_hosts_gaps(ring: StepRing) -> None:
    clock = FakeClock(100.0)
    stream = FakeStream(clock)
    worker = FakeModelRunnerV2Worker(clock, stream)
    timer = DeviceStepTimer(ring, FakeEventClock(stream))
    worker.execute_model = timer.wrap_execute_model(worker.execute_model)  # type: ignore[method-assign]
    worker.sample_tokens = timer.wrap_sample_tokens(worker.sample_tokens)  # type: ignore[method-assign]
    step_timing = worker.model_runner.step_timing
    step_timing.forward_start = timer.wrap_forward_start(step_timing.forward_start)  # type: ignore[method-assign]
    for index in range(3):
        assert worker.execute_model(FakeSchedulerOutput(index, 64)) is None
        clock.advance(worker.BITMASK_S)  # the device has finished the forward meanwhile
        assert worker.sample_tokens(None) == "output"
        clock.advance(0.100)  # idle until the next request
        work_s = worker.FORWARD_S + worker.SAMPLE_S
        assert ring.read(index) == pytest.approx(work_s)
