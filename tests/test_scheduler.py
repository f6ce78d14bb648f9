"""The DLFP scheduler against vLLM's real ``Scheduler``, built directly on CPU.

No engine process and no model run: like vLLM's own scheduler tests, the
scheduler is constructed from a ``VllmConfig`` (a tiny Qwen3 ``config.json``
in a temporary directory) and a ``KVCacheConfig``, fed ``Request`` objects,
and given fake ``ModelRunnerOutput``s (one sampled token per finished prefill
or decode).
"""

from __future__ import annotations

import random
import types
from collections.abc import Callable
from typing import Any

import pytest
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.engine import EngineCoreOutputs, UtilityOutput
from vllm.v1.engine.core import EngineCore, EngineCoreProc
from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder, UtilityResult

from engine_worker.contract.dlfp_config import ControllerMode, DLFPConfig, PrefillOrder
from engine_worker.contract.engine_hooks import scheduler_cls_name
from engine_worker.engine_core import capped_step
from engine_worker.engine_core import scheduler as dlfp_scheduler
from engine_worker.engine_core.scheduler import (
    DLFPAsyncScheduler,
    DLFPScheduler,
    DLFPSchedulerMixin,
)
from tests.scheduler_helpers import (
    make_request,
    run_step,
)

pytestmark = pytest.mark.engine

FIXED_64 = DLFPConfig(controller=ControllerMode.FIXED, fixed_cap_tokens=64)
PAIRS = [(Scheduler, DLFPScheduler), (AsyncScheduler, DLFPAsyncScheduler)]


def dlfp(scheduler: Scheduler) -> DLFPSchedulerMixin:
    assert isinstance(scheduler, DLFPSchedulerMixin)
    return scheduler


def decoding_ids(scheduler: Scheduler) -> list[str]:
    return [r.request_id for r in scheduler.running if not r.is_prefill_chunk]


def random_workload(seed: int, num_steps: int) -> dict[int, list[tuple[str, int, int]]]:
    """step -> requests (id, prompt tokens, max tokens) to add before that step."""
    rng = random.Random(seed)
    workload: dict[int, list[tuple[str, int, int]]] = {}
    for step in range(num_steps):
        if step == 0 or rng.random() < 0.15:
            long = rng.random() < 0.5
            size = rng.randrange(300, 1500) if long else rng.randrange(5, 60)
            workload[step] = [(f"r{step}", size, rng.randrange(5, 40))]
    return workload


def replay(scheduler: Scheduler, seed: int, num_steps: int) -> list[dict[str, int]]:
    workload = random_workload(seed, num_steps)
    scheduled: list[dict[str, int]] = []
    for step in range(num_steps):
        for request_id, size, max_tokens in workload.get(step, []):
            scheduler.add_request(make_request(request_id, size, max_tokens))
        scheduled.append(dict(run_step(scheduler).num_scheduled_tokens))
    return scheduled


@pytest.mark.parametrize(("vllm_cls", "dlfp_cls"), PAIRS)
def test_off_mode_schedules_exactly_like_vllm(
    build: Callable[..., Scheduler], vllm_cls: type[Scheduler], dlfp_cls: type[Scheduler]
) -> None:
    off = DLFPConfig(controller=ControllerMode.OFF)
    expected = replay(build(vllm_cls), seed=1, num_steps=150)
    assert replay(build(dlfp_cls, off), seed=1, num_steps=150) == expected


def test_prefill_without_decode_is_not_capped(build: Callable[..., Scheduler]) -> None:
    plain, dlfp = build(Scheduler), build(DLFPScheduler, FIXED_64)
    for scheduler in (plain, dlfp):
        scheduler.add_request(make_request("a", 1500))
        scheduler.add_request(make_request("b", 1200))
    steps_before_first_decode = 0
    while not decoding_ids(dlfp):
        assert run_step(dlfp).num_scheduled_tokens == run_step(plain).num_scheduled_tokens
        steps_before_first_decode += 1
    assert steps_before_first_decode == 3  # 512 + 512 + (476 + 36): all far above 64
    # Now "a" decodes beside "b"'s prefill: the cap applies.
    assert run_step(dlfp).num_scheduled_tokens == {"a": 1, "b": 64}
    assert run_step(plain).num_scheduled_tokens == {"a": 1, "b": 511}


@pytest.mark.parametrize("dlfp_cls", [DLFPScheduler, DLFPAsyncScheduler])
def test_prefill_capped_and_every_decode_served(
    build: Callable[..., Scheduler], dlfp_cls: type[Scheduler]
) -> None:
    dlfp_ct = DLFPConfig(controller=ControllerMode.DLFP_CT, max_cap_tokens=256)
    # vLLM's own threshold (200) lets several prefills run at once, so decodes
    # also end up behind two prefills (the reordering path).
    for config, threshold in ((FIXED_64, 0), (FIXED_64, 200), (dlfp_ct, 0)):
        scheduler = build(dlfp_cls, config, long_prefill_token_threshold=threshold)
        workload = random_workload(seed=2, num_steps=200)
        num_mixed = 0
        for step in range(200):
            for request_id, size, max_tokens in workload.get(step, []):
                scheduler.add_request(make_request(request_id, size, max_tokens))
            decodes = decoding_ids(scheduler)
            scheduled = run_step(scheduler).num_scheduled_tokens
            assert all(scheduled.get(r, 0) == 1 for r in decodes), (step, decodes, scheduled)
            record = dlfp(scheduler).dlfp_get_steps(step)[0]
            num_prefill = sum(n for r, n in scheduled.items() if r not in decodes)
            assert record["num_prefill_tokens"] == num_prefill
            if decodes:
                assert num_prefill <= record["cap_tokens"] <= config.max_cap_tokens
                num_mixed += num_prefill > 0
        assert num_mixed > 20  # the workload really mixed prefill with decodes


def schedule_two_prefills_ahead_of_a_decode(scheduler: Scheduler) -> dict[str, int]:
    # vLLM's own threshold (200) admits all three in one uncapped step, in
    # this order; "d" then decodes behind two unfinished prefills.
    for request_id, size in (("p1", 1000), ("p2", 1000), ("d", 10)):
        scheduler.add_request(make_request(request_id, size))
    assert run_step(scheduler).num_scheduled_tokens == {"p1": 200, "p2": 200, "d": 10}
    assert [r.request_id for r in scheduler.running] == ["p1", "p2", "d"]
    assert decoding_ids(scheduler) == ["d"]
    return dict(run_step(scheduler).num_scheduled_tokens)


@pytest.mark.parametrize("dlfp_cls", [DLFPScheduler, DLFPAsyncScheduler])
def test_decode_behind_two_prefills_gets_its_token(
    build: Callable[..., Scheduler], dlfp_cls: type[Scheduler]
) -> None:
    scheduler = build(dlfp_cls, FIXED_64, long_prefill_token_threshold=200)
    assert schedule_two_prefills_ahead_of_a_decode(scheduler) == {"d": 1, "p1": 64}
    # The running order is restored after the step.
    assert [r.request_id for r in scheduler.running] == ["p1", "p2", "d"]


def test_decode_behind_two_prefills_starves_without_reordering(
    build: Callable[..., Scheduler], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The edge case is real: budget and threshold alone let p2 take d's slot.
    monkeypatch.setattr(capped_step, "needs_decodes_first", lambda running: False)
    fcfs = FIXED_64.model_copy(update={"prefill_order": PrefillOrder.FCFS})
    scheduler = build(DLFPScheduler, fcfs, long_prefill_token_threshold=200)
    assert schedule_two_prefills_ahead_of_a_decode(scheduler) == {"p1": 64, "p2": 1}


def test_kv_pressure_keeps_running_consistent(build: Callable[..., Scheduler]) -> None:
    # Few KV blocks force preemptions, also while running is reordered.
    scheduler = build(DLFPScheduler, FIXED_64, long_prefill_token_threshold=200, num_blocks=120)
    workload = random_workload(seed=3, num_steps=300)
    for step in range(300):
        for request_id, size, max_tokens in workload.get(step, []):
            scheduler.add_request(make_request(request_id, size, max_tokens))
        decodes = decoding_ids(scheduler)
        scheduled = run_step(scheduler).num_scheduled_tokens
        running_ids = [r.request_id for r in scheduler.running]
        assert len(running_ids) == len(set(running_ids))
        # A decode is either served or was preempted by vLLM (back to waiting).
        for request_id in decodes:
            request = scheduler.requests.get(request_id)
            assert (
                request is None or scheduled.get(request_id) == 1 or request_id not in running_ids
            )
    assert dlfp(scheduler).dlfp_get_state()["num_steps"] == 300


def test_apply_config_takes_effect_next_step(build: Callable[..., Scheduler]) -> None:
    scheduler = build(DLFPScheduler, FIXED_64)
    scheduler.add_request(make_request("a", 10))
    run_step(scheduler)
    scheduler.add_request(make_request("b", 1000))
    assert run_step(scheduler).num_scheduled_tokens == {"a": 1, "b": 64}
    fixed_32 = DLFPConfig(controller=ControllerMode.FIXED, fixed_cap_tokens=32)
    state = dlfp(scheduler).dlfp_apply_config(fixed_32.model_dump(mode="json"))
    assert state["cap_tokens"] == 32 and state["config"]["fixed_cap_tokens"] == 32
    assert run_step(scheduler).num_scheduled_tokens == {"a": 1, "b": 32}
    dlfp(scheduler).dlfp_apply_config({"controller": "off"})
    assert run_step(scheduler).num_scheduled_tokens == {"a": 1, "b": 511}
    with pytest.raises(ValueError):
        dlfp(scheduler).dlfp_apply_config({"controller": "fixed", "fixed_cap_tokens": 5000})
    assert dlfp(scheduler).dlfp_get_state()["mode"] == "off"


def test_initial_config_comes_from_additional_config(build: Callable[..., Scheduler]) -> None:
    assert dlfp(build(DLFPScheduler)).dlfp_config == DLFPConfig()
    assert dlfp(build(DLFPScheduler, FIXED_64)).dlfp_config == FIXED_64


def test_engine_core_utilities_delegate_and_survive_msgpack(
    build: Callable[..., Scheduler],
) -> None:
    scheduler = build(DLFPScheduler, FIXED_64)
    scheduler.add_request(make_request("a", 40))
    run_step(scheduler)
    engine_core: Any = types.SimpleNamespace(scheduler=scheduler)
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("dlfp_get_state", ()),
        ("dlfp_get_steps", (0,)),
        ("dlfp_apply_config", (DLFPConfig().model_dump(mode="json"),)),
    ]
    for name, args in calls:
        # The same lookup and argument check EngineCoreProc does for a utility call.
        method = types.MethodType(getattr(EngineCore, name), engine_core)
        result = method(*EngineCoreProc._convert_msgspec_args(method, args))
        output = UtilityOutput(call_id=1, result=UtilityResult(result))
        frames = MsgpackEncoder().encode(EngineCoreOutputs(utility_output=output))
        decoded = MsgpackDecoder(EngineCoreOutputs).decode(frames)
        assert decoded.utility_output is not None and decoded.utility_output.result is not None
        assert decoded.utility_output.result.result == result
    steps = dlfp(scheduler).dlfp_get_steps(0)
    assert steps[0]["num_prefill_tokens"] == 40 and steps[0]["cap_tokens"] is None


def test_engine_core_utilities_reject_a_plain_scheduler(build: Callable[..., Scheduler]) -> None:
    engine_core: Any = types.SimpleNamespace(scheduler=build(Scheduler))
    with pytest.raises(TypeError, match="not a DLFP scheduler"):
        EngineCore.dlfp_get_state(engine_core)  # type: ignore[attr-defined, unused-ignore]


def test_scheduler_cls_name_resolves() -> None:
    assert scheduler_cls_name(False) == "engine_worker.engine_core.scheduler.DLFPScheduler"
    assert scheduler_cls_name(True) == "engine_worker.engine_core.scheduler.DLFPAsyncScheduler"
    for cls in (DLFPScheduler, DLFPAsyncScheduler):  # the gateway's strings name the classes
        assert scheduler_cls_name(cls is DLFPAsyncScheduler) == f"{cls.__module__}.{cls.__name__}"


def test_a_cap_beyond_the_budget_less_the_decodes_is_warned_of(
    build: Callable[..., Scheduler], monkeypatch: pytest.MonkeyPatch
) -> None:
    """16 running requests and a budget of 512: a cap above 496 is out of reach."""
    warnings: list[str] = []
    monkeypatch.setattr(
        dlfp_scheduler.logger, "warning", lambda message, *args: warnings.append(message % args)
    )
    build(DLFPScheduler, DLFPConfig(max_cap_tokens=496))
    assert warnings == []
    build(DLFPScheduler, DLFPConfig(max_cap_tokens=504))
    assert len(warnings) == 1 and "less 16 decode slots" in warnings[0]


def test_token_lag_follows_model_runner_v2s_decode_stagger(
    build: Callable[..., Scheduler],
) -> None:
    """Model Runner V2 (CUDA's default) under 2 pipeline stages schedules each decode every
    second step; the V1 runner under async scheduling schedules it every step."""
    scheduler = dlfp(build(DLFPAsyncScheduler, FIXED_64))
    assert isinstance(scheduler, AsyncScheduler)
    # vLLM's own names for the runner and the stagger (pipeline_parallel_size here: 1).
    assert scheduler.decode_stagger == scheduler.parallel_config.pipeline_parallel_size == 1
    assert scheduler._steps_between_tokens() == 1
    scheduler.use_v2_model_runner = True
    scheduler.decode_stagger = 2
    assert scheduler._steps_between_tokens() == 2
    scheduler.use_v2_model_runner = False
    assert scheduler._steps_between_tokens() == 1
