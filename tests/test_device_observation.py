"""``observation: device``: the shared-memory ring, the worker's timer, and the controller
that feeds back device time and plans in completion time (fake clocks, no vLLM)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest

from bench.lib.plant import ContextPlant
from engine_worker.contract.device_defaults import defaults_for
from engine_worker.contract.dlfp_config import Device, DLFPConfig, Observation, Plan
from engine_worker.contract.step_ring import STEP_INDEX_ATTR, StepRing
from engine_worker.controller.cap_controller import PrefillCapController
from engine_worker.controller.cost_model import StepShape, chunk_attention
from engine_worker.controller.deadline_plan import DeadlinePlan
from engine_worker.controller.host_share import HostShareWindow
from engine_worker.worker.device_timer import DeviceStepTimer, install
from gateway.engine import build_engine
from gateway.settings import Settings
from tests.cap_params import cap_params
from tests.fake_clock import FakeClock


@pytest.fixture
def ring() -> Iterator[StepRing]:
    created = StepRing.create(num_slots=8)
    yield created
    created.close()


# --- the ring ---------------------------------------------------------------


def test_ring_reads_what_was_written_from_another_attachment(ring: StepRing) -> None:
    reader = StepRing.attach(ring.name, num_slots=8)
    try:
        assert reader.read(3) is None  # never written
        ring.write(3, 0.125)
        assert reader.read(3) == 0.125
        assert reader.read(11) is None  # same slot, another step
    finally:
        reader.close()
    assert ring.read(3) == 0.125  # a reader's close leaves the segment


def test_ring_slot_holds_the_newest_step_only(ring: StepRing) -> None:
    ring.write(2, 0.010)
    ring.write(10, 0.020)  # wraps onto step 2's slot
    assert ring.read(2) is None
    assert ring.read(10) == 0.020
    ring.write(4, float("nan"))
    assert ring.read(4) is None


def test_creator_close_unlinks_the_segment() -> None:
    created = StepRing.create(num_slots=4)
    name = created.name
    created.close()
    with pytest.raises(FileNotFoundError):
        StepRing.attach(name, num_slots=4)


def test_attach_refuses_a_segment_too_small(ring: StepRing) -> None:
    with pytest.raises(ValueError, match="fewer than"):
        StepRing.attach(ring.name, num_slots=64)


# --- the worker's timer -----------------------------------------------------


class LazyClock:
    """Marks on the fake clock, known only once ``is_complete`` (like a CUDA event)."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.is_complete = False

    def mark(self) -> float:
        return self.clock()

    def elapsed_s(self, start: float, end: float, *, wait: bool) -> float | None:
        return end - start if self.is_complete or wait else None


@dataclass
class FakeSchedulerOutput:
    total_num_scheduled_tokens: int


class AsyncOutput:
    def __init__(self) -> None:
        self.num_gets = 0

    def get_output(self) -> str:
        self.num_gets += 1
        return "output"


class FakeWorker:
    """vLLM's split: execute_model returns None when sample_tokens must follow."""

    def __init__(self, clock: FakeClock, *, is_async: bool = False) -> None:
        self.clock = clock
        self.is_async = is_async

    def execute_model(self, scheduler_output: FakeSchedulerOutput) -> Any:
        self.clock.advance(0.030)
        return None if scheduler_output.total_num_scheduled_tokens else "empty output"

    def sample_tokens(self, grammar_output: object) -> Any:
        self.clock.advance(0.010)
        return AsyncOutput() if self.is_async else "output"


def step(worker: Any, index: int | None, num_tokens: int = 64) -> Any:
    output = FakeSchedulerOutput(num_tokens)
    if index is not None:
        setattr(output, STEP_INDEX_ATTR, index)
    result = worker.execute_model(output)
    return result if result is not None else worker.sample_tokens(None)


def timed_worker(
    ring: StepRing, clock: FakeClock, lazy: LazyClock, *, is_async: bool = False
) -> FakeWorker:
    worker = FakeWorker(clock, is_async=is_async)
    timer = DeviceStepTimer(ring, lazy)
    worker.execute_model = timer.wrap_execute_model(worker.execute_model)  # type: ignore[method-assign]
    worker.sample_tokens = timer.wrap_sample_tokens(worker.sample_tokens)  # type: ignore[method-assign]
    return worker


def test_timer_spans_execute_model_and_sample_tokens(ring: StepRing) -> None:
    clock = FakeClock(100.0)
    worker = timed_worker(ring, clock, LazyClock(clock))
    assert step(worker, 0) == "output"
    assert ring.read(0) == pytest.approx(0.040)
    # A step with nothing scheduled returns from execute_model alone, and is
    # written once its end is known, never waited for.
    assert step(worker, 1, num_tokens=0) == "empty output"
    assert ring.read(1) is None
    step(worker, 2)
    assert ring.read(1) == pytest.approx(0.030)


def test_timer_skips_a_step_without_an_index(ring: StepRing) -> None:
    clock = FakeClock(100.0)
    worker = timed_worker(ring, clock, LazyClock(clock))
    step(worker, None)
    step(worker, 1)
    assert [ring.read(i) for i in range(2)] == [None, pytest.approx(0.040)]


def test_async_output_is_written_when_vllm_waited_for_its_copy(ring: StepRing) -> None:
    clock = FakeClock(100.0)
    worker = timed_worker(ring, clock, LazyClock(clock), is_async=True)
    output = step(worker, 0)
    assert ring.read(0) is None
    output.get_output()  # the end event may still be pending: it is waited for
    assert ring.read(0) == pytest.approx(0.040) and output.num_gets == 1


def test_install_marks_the_forward_launch_where_the_runner_has_one(ring: StepRing) -> None:
    class StepTiming:
        def forward_start(self) -> None:
            pass

    worker = FakeWorker(FakeClock(100.0))
    worker.model_runner = type("Runner", (), {"step_timing": StepTiming()})()  # type: ignore[attr-defined]
    forward_start = worker.model_runner.step_timing.forward_start  # type: ignore[attr-defined]
    install(worker, ring, is_cuda=False)
    assert worker.model_runner.step_timing.forward_start is not forward_start  # type: ignore[attr-defined]
    assert worker.model_runner.step_timing.forward_start.__wrapped__ == forward_start  # type: ignore[attr-defined]


def test_install_wraps_once_with_host_time_on_cpu(ring: StepRing) -> None:
    worker = FakeWorker(FakeClock(100.0))
    timer = install(worker, ring, is_cuda=False)
    assert install(worker, ring, is_cuda=False) is timer
    step(worker, 5)
    assert timer.num_written == 1
    device_s = ring.read(5)
    assert device_s is not None and 0 <= device_s < 1


# --- the controller ---------------------------------------------------------

PARAMS = cap_params(
    target_ms=100.0,
    min_cap_tokens=32,
    step_tokens=32,
    fixed_cap_tokens=64,
    feedforward=False,
    observation="device",
)


def test_device_is_a_setting() -> None:
    assert DLFPConfig(observation="device").observation == Observation.DEVICE  # type: ignore[arg-type]
    assert DLFPConfig().observation == Observation.COMPLETION  # CPU default
    assert defaults_for("cuda").dlfp.observation == Observation.DEVICE


@pytest.mark.parametrize(
    ("device", "setting", "expected"), [("cpu", None, 64), ("cuda", None, 256), ("cuda", 32, 32)]
)
def test_engine_runs_the_devices_number_of_sequences_unless_set(
    device: Device, setting: int | None, expected: int
) -> None:
    settings = Settings(max_num_seqs=setting, device=device)
    engine = build_engine(settings, device, defaults_for(device).dlfp)
    assert engine.spec.max_num_seqs == expected  # type: ignore[attr-defined]


def mixed_step(
    controller: PrefillCapController, clock: FakeClock, seconds: float, device_s: float | None
) -> Any:
    controller.on_schedule(1, clock())
    controller.on_scheduled(256, 1, clock())
    clock.advance(seconds)
    return controller.on_step_done(clock(), device_s=device_s)


def test_device_time_is_fed_back_when_given_and_completion_when_not() -> None:
    clock = FakeClock()
    controller = PrefillCapController(PARAMS, clock=clock, wall_clock=clock)
    assert controller.state.observation_in_force is None
    mixed_step(controller, clock, 0.150, None)  # the first completion pairs with nothing
    timed = mixed_step(controller, clock, 0.150, 0.080)
    assert timed.device_s == 0.080 and timed.observation_s() == 0.080
    assert controller.state.last_observation_ms == pytest.approx(80.0)
    assert controller.state.observation_in_force == "device"
    assert timed.to_dict()["device_ms"] == pytest.approx(80.0)
    assert timed.to_dict()["observation_ms"] == pytest.approx(80.0)
    untimed = mixed_step(controller, clock, 0.150, None)
    assert untimed.observation_s() == pytest.approx(0.150)  # its completion interval
    assert controller.state.last_observation_ms == pytest.approx(150.0)
    assert controller.state.observation_in_force == "completion"
    assert untimed.to_dict()["device_ms"] is None


def test_other_observations_ignore_the_device_time() -> None:
    clock = FakeClock()
    params = replace(PARAMS, observation=Observation.COMPLETION)
    controller = PrefillCapController(params, clock=clock, wall_clock=clock)
    mixed_step(controller, clock, 0.150, None)
    record = mixed_step(controller, clock, 0.150, 0.080)
    assert record.observation_s() == pytest.approx(0.150)
    assert record.to_dict()["device_ms"] == pytest.approx(80.0)  # still reported
    assert controller.state.observation_in_force == "completion"
    assert controller.state.host_share_ms is None


def test_host_share_is_a_high_quantile_of_completion_minus_device() -> None:
    window = HostShareWindow(quantile=0.9, capacity=10)
    assert window.value_s() == 0.0
    for host_ms in range(1, 21):  # the window keeps 11..20 ms
        window.observe(0.100 + host_ms / 1000.0, 0.100)
    assert window.num_samples == 10
    assert window.value_s() == pytest.approx(0.019)
    window.observe(0.050, 0.080)  # a device time past its interval counts as no host time
    assert window.value_s() == pytest.approx(0.019)


# --- the deadline plan in completion time -----------------------------------

ITL_SLO_S = 0.5
PLANT = ContextPlant(base_s=0.060, decode_s=0.0075, noise=0.0)
DEADLINE = replace(
    PARAMS,
    target_ms="auto",
    feedforward=True,
    plan=Plan.DEADLINE,
    min_cap_tokens=8,
    initial_cap_tokens=256,
    max_cap_tokens=1024,
    step_tokens=8,
    fixed_cap_tokens=128,
)


@dataclass
class Served:
    controller: PrefillCapController
    num_mixed: int = 0
    num_late: int = 0
    """Mixed steps whose completion (device + host) ended past the ITL objective."""
    num_prefill_tokens: int = 0


def serve_with_host(host_s: float, num_steps: int = 300) -> Served:
    """Eight streams and one long prompt after another; each step's completion is its
    device time plus ``host_s``."""
    rng = random.Random(0)
    clock = FakeClock()
    controller = PrefillCapController(DEADLINE, clock=clock, wall_clock=clock)
    for _ in range(200):  # a fitted model of device time
        computed, chunk = rng.randrange(0, 3000), rng.randrange(0, 400)
        shape = StepShape(8, 4000, chunk, chunk_attention(computed, chunk))
        controller.observe_model(shape, PLANT.exact_s(shape))
        controller.observe_model(StepShape(8, 4000), PLANT.exact_s(StepShape(8, 4000)))
    served = Served(controller)
    computed, length = 0, 3000
    for index in range(num_steps):
        candidates = [(computed, length - computed)]
        cap = controller.on_schedule(
            8, candidates=candidates, decode_context_tokens=4000, oldest_token_step=index - 1
        )
        num_prefill = min(cap if cap is not None else length, length - computed)
        shape = StepShape(8, 4000, num_prefill, chunk_attention(computed, num_prefill))
        controller.on_scheduled(num_prefill, 8, shape=shape)
        device_s = PLANT.exact_s(shape)
        clock.advance(device_s + host_s)
        controller.on_step_done(device_s=device_s)
        if num_prefill and index >= 20:  # after the host share and the margin filled
            served.num_mixed += 1
            served.num_late += device_s + host_s > ITL_SLO_S
            served.num_prefill_tokens += num_prefill
        computed = 0 if computed + num_prefill >= length else computed + num_prefill
    return served


def test_deadline_plan_adds_the_host_share_to_the_device_prediction() -> None:
    slow_host = serve_with_host(0.150)
    assert slow_host.controller.state.host_share_ms == pytest.approx(150.0)
    # At most the plan's aim (0.5%) late: its margin's correction goes below 1 where
    # nothing ends late, as on this exact plant; without the host's share every step would.
    assert slow_host.num_mixed > 200
    assert slow_host.num_late <= 0.005 * slow_host.num_mixed + 1, slow_host
    fast_host = serve_with_host(0.0)
    assert fast_host.controller.state.host_share_ms == pytest.approx(0.0, abs=1e-6)
    assert fast_host.num_late <= 0.005 * fast_host.num_mixed + 1, fast_host
    # Same model, same deadlines: the host's 150 ms comes out of the prefill.
    assert slow_host.num_prefill_tokens < 0.8 * fast_host.num_prefill_tokens, (slow_host, fast_host)


def test_the_slack_rate_a_prompt_sees_counts_the_host_share() -> None:
    # At-risk classification and the floor for TTFT deadlines read one rate: tokens over
    # the time a prompt waits for their step, the host's share included under device.
    for host_s in (0.150, 0.0):
        plan = serve_with_host(host_s, num_steps=40).controller._deadline_plan
        assert plan.host_s() == pytest.approx(host_s, abs=1e-6)
        step_s = 0.2 + plan.slack.increment_s(100, 5e4) + host_s
        rate = plan._rate_tokens_per_s(100, 5e4, 0.2, plan.host_s())
        assert rate == pytest.approx(100 / step_s)


def test_the_rate_the_scheduler_reads_is_that_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    # ``slack_rate_tokens_per_s``, which at-risk classification and the boost read, is the
    # one rate of the latest planned step's budget, with the host's share.
    returned: list[float] = []
    hosts: list[float] = []
    rate_of = DeadlinePlan._rate_tokens_per_s

    def spy(
        plan: DeadlinePlan, tokens: int, attention: float, decode_s: float, host_s: float
    ) -> float:
        hosts.append(host_s)
        returned.append(rate_of(plan, tokens, attention, decode_s, host_s))
        return returned[-1]

    monkeypatch.setattr(DeadlinePlan, "_rate_tokens_per_s", spy)
    served = serve_with_host(0.150, num_steps=40)
    plan = served.controller._deadline_plan
    assert returned and plan.host_s() == pytest.approx(0.150, abs=1e-6)
    assert served.controller.slack_rate_tokens_per_s() == returned[-1]
    assert hosts[-1] == plan.host_s()
