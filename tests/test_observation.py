"""The ``dlfp-ct`` observation setting, the completion lag, and the engine's batch-queue set-up."""

from __future__ import annotations

import types
from dataclasses import replace

import pytest

from engine_worker.client.engine_args import _bind_cpu_workers, _honour_async_scheduling
from engine_worker.contract.dlfp_config import DLFPConfig, Observation
from engine_worker.controller.cap_controller import PrefillCapController
from engine_worker.controller.cost_model import StepShape, chunk_attention
from engine_worker.controller.step_timing import (
    StepRecord,
    StepTimeline,
    logged_prefill_start,
    logged_shape,
)
from gateway.settings import Settings
from tests.cap_params import cap_params
from tests.fake_clock import FakeClock

PARAMS = cap_params(
    target_ms=100.0, min_cap_tokens=32, step_tokens=32, fixed_cap_tokens=64, feedforward=False
)


def record(index: int, *, num_decoding: int = 1, dispatched_at_s: float = 0.0) -> StepRecord:
    return StepRecord(
        step_index=index,
        mode="dlfp-ct",
        num_decoding=num_decoding,
        num_prefill_tokens=64,
        num_decode_tokens=num_decoding,
        cap_tokens=64,
        cap_generation=0,
        scheduled_at_s=dispatched_at_s,
        dispatched_at_s=dispatched_at_s,
    )


def test_completion_interval_spans_the_steps_between_two_tokens() -> None:
    timeline = StepTimeline(completion_lag_steps=2)
    for index, dispatched in enumerate((0.0, 0.01, 0.02, 0.03)):
        timeline.dispatch(record(index, dispatched_at_s=dispatched))
    done = [timeline.complete(t, t) for t in (0.1, 0.15, 0.3, 0.4)]
    assert [r.completion_interval_s if r else None for r in done] == [
        None,
        None,
        pytest.approx(0.2),
        pytest.approx(0.25),
    ]
    # Busy time stays one step's: from the later of its dispatch and the previous completion.
    assert done[3] is not None and done[3].busy_s == pytest.approx(0.1)


def test_completion_lag_must_be_positive() -> None:
    with pytest.raises(ValueError):
        StepTimeline(completion_lag_steps=0)


@pytest.mark.parametrize(
    ("observation", "expected"), [("busy", 0.05), ("completion", 0.08), ("max", 0.08)]
)
def test_observation_choice(observation: str, expected: float) -> None:
    step = replace(record(0), busy_s=0.05, completion_interval_s=0.08, observation=observation)
    assert step.completion_timed_s(observation) == expected
    assert step.observation_s() == expected


def test_step_scheduled_with_nothing_decoding_falls_back_to_busy() -> None:
    # Its completion interval may hold time the engine sat idle waiting for a request.
    step = replace(record(0, num_decoding=0), busy_s=0.05, completion_interval_s=9.0)
    assert step.completion_timed_s("completion") == 0.05


def test_unknown_observation_is_rejected() -> None:
    with pytest.raises(ValueError):
        DLFPConfig.model_validate({"observation": "interval"})


def test_observation_setting_reaches_the_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    assert DLFPConfig().observation == Observation.COMPLETION
    monkeypatch.setenv("DLFP_OBSERVATION", "busy")
    config = Settings().dlfp_config("cpu")
    assert config.observation == Observation.BUSY
    assert PrefillCapController.from_config(config).params.observation == "busy"


def run_sync_loop(observation: str, host_s: float, device_s: float, num_steps: int = 30) -> int:
    """A synchronous loop whose steps take ``device_s`` on the device and ``host_s`` between."""
    clock = FakeClock()
    controller = PrefillCapController(
        replace(PARAMS, observation=observation), clock=clock, wall_clock=clock
    )
    for _ in range(num_steps):
        cap = controller.on_schedule(2)
        assert cap is not None
        controller.on_scheduled(cap, 2)
        clock.now += device_s
        controller.on_step_done()
        clock.now += host_s
    state = controller.state
    assert state.cap_tokens is not None
    return state.cap_tokens


def test_completion_observation_counts_the_host_time_streams_wait_for() -> None:
    # 80 ms on the device beside 40 ms of host time: a stream waits 120 ms, over the target.
    assert run_sync_loop("completion", host_s=0.04, device_s=0.08) == PARAMS.min_cap_tokens
    # Busy time sees 80 ms only and grows the cap.
    assert run_sync_loop("busy", host_s=0.04, device_s=0.08) == PARAMS.max_cap_tokens


def test_bind_cpu_workers_one_core_each_when_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setattr("os.sched_getaffinity", lambda _: {0, 1})
    _bind_cpu_workers(2)
    import os

    assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "0|1"
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    _bind_cpu_workers(2)
    assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"


def test_bind_cpu_workers_leaves_one_worker_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    _bind_cpu_workers(1)
    import os

    assert "VLLM_CPU_OMP_THREADS_BIND" not in os.environ


@pytest.mark.parametrize("engine_args", [{}, {"async_scheduling": "true"}])
def test_async_scheduling_stays_as_the_engine_core_will_run(engine_args: dict[str, str]) -> None:
    # vLLM CPU 0.32's engine core turns it off again after its handshake; the
    # frontend's copy, which picks the scheduler class, must agree.
    config = types.SimpleNamespace(scheduler_config=types.SimpleNamespace(async_scheduling=False))
    _honour_async_scheduling(config, engine_args)
    assert config.scheduler_config.async_scheduling is False


def test_a_logged_step_reads_back_as_the_shape_it_ran() -> None:
    """The step log keeps the mean context a prefill token attends to; reading it back
    gives the step's token-context product and, for one chunk, where the chunk began."""
    shape = StepShape(8, 4_000, 64, chunk_attention(1_000, 64))
    entry = replace(record(0, num_decoding=8), num_decode_tokens=8, shape=shape).to_dict()
    read = logged_shape(entry)
    assert read.num_decode_tokens == 8 and read.decode_context_tokens == 4_000
    assert read.num_prefill_tokens == 64
    assert read.attention_tokens2 == pytest.approx(shape.attention_tokens2, rel=1e-3)
    assert logged_prefill_start(entry) == 1_000
