"""SRPF under the cap, on vLLM's real ``Scheduler`` built in-process (no model run).

A short prompt that arrives while a long prompt's chunked prefill is capped
beside a running decode starts in the next step under ``srpf``; under
``fcfs`` (vLLM's order) it waits for the long prefill to finish. The long
prefill never goes more than ``MAX_HELD_STEPS`` capped steps without tokens.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from vllm.v1.core.sched.scheduler import Scheduler

from engine_worker.contract.dlfp_config import ControllerMode, DLFPConfig, PrefillOrder
from engine_worker.engine_core.prefill_order import (
    MAX_HELD_STEPS,
    Candidate,
    needed_rate,
    paced_deadline,
    select,
)
from engine_worker.engine_core.scheduler import DLFPAsyncScheduler, DLFPScheduler
from tests.scheduler_helpers import make_request, run_step
from tests.test_scheduler import decoding_ids

FIXED_64 = DLFPConfig(controller=ControllerMode.FIXED, fixed_cap_tokens=64)


def long_prefill_beside_a_decode(scheduler: Scheduler) -> None:
    """'d' decodes while 'long' (2,000 tokens) is chunk-prefilled at 64 a step."""
    scheduler.add_request(make_request("d", 10, max_tokens=400))
    run_step(scheduler)
    scheduler.add_request(make_request("long", 2000))
    assert run_step(scheduler).num_scheduled_tokens == {"d": 1, "long": 64}


@pytest.mark.parametrize("dlfp_cls", [DLFPScheduler, DLFPAsyncScheduler])
def test_short_prompt_starts_next_step_under_srpf(
    build: Callable[..., Scheduler], dlfp_cls: type[Scheduler]
) -> None:
    scheduler = build(dlfp_cls, FIXED_64)
    long_prefill_beside_a_decode(scheduler)
    scheduler.add_request(make_request("short", 20))
    # The short prompt takes what it needs first; the long one gets the rest of the cap
    # (44 tokens: running requests go first in vLLM, so the step's threshold becomes 44).
    assert run_step(scheduler).num_scheduled_tokens == {"d": 1, "short": 20, "long": 44}
    assert "short" in decoding_ids(scheduler)
    assert [r.request_id for r in scheduler.running] == ["d", "long", "short"]
    # Had the long prompt's share been smaller than the short one, it would wait a step.
    scheduler.add_request(make_request("short-2", 40))
    assert run_step(scheduler).num_scheduled_tokens == {"d": 1, "short": 1, "short-2": 40}


def test_short_prompt_waits_for_the_long_prefill_under_fcfs(
    build: Callable[..., Scheduler],
) -> None:
    fcfs = FIXED_64.model_copy(update={"prefill_order": PrefillOrder.FCFS})
    scheduler = build(DLFPScheduler, fcfs)
    long_prefill_beside_a_decode(scheduler)
    scheduler.add_request(make_request("short", 40))
    num_steps_waited = 0
    while "short" not in run_step(scheduler).num_scheduled_tokens:
        num_steps_waited += 1
    assert num_steps_waited >= 25  # the rest of the long prompt, 64 tokens a step


def test_a_short_prompt_larger_than_the_cap_holds_the_long_one_out(
    build: Callable[..., Scheduler],
) -> None:
    scheduler = build(DLFPScheduler, FIXED_64)
    long_prefill_beside_a_decode(scheduler)
    scheduler.add_request(make_request("short", 100))
    assert run_step(scheduler).num_scheduled_tokens == {"d": 1, "short": 64}
    assert run_step(scheduler).num_scheduled_tokens == {"d": 1, "short": 36, "long": 28}


def test_long_prefill_never_starves_under_a_stream_of_short_prompts(
    build: Callable[..., Scheduler],
) -> None:
    scheduler = build(DLFPScheduler, FIXED_64)
    long_prefill_beside_a_decode(scheduler)
    without_tokens = 0
    longest_wait = 0
    for step in range(60):
        # A new 64-token prompt every step would take the whole cap for ever.
        scheduler.add_request(make_request(f"s{step}", 64, max_tokens=2))
        scheduled = run_step(scheduler).num_scheduled_tokens
        if "long" not in scheduler.requests or "long" in decoding_ids(scheduler):
            break
        without_tokens = 0 if "long" in scheduled else without_tokens + 1
        longest_wait = max(longest_wait, without_tokens)
    assert 1 <= longest_wait <= MAX_HELD_STEPS


def test_priority_comes_before_srpf(build: Callable[..., Scheduler], model_dir: object) -> None:
    scheduler = build(DLFPScheduler, FIXED_64, policy="priority")
    scheduler.add_request(make_request("d", 10, max_tokens=400))
    run_step(scheduler)
    scheduler.add_request(make_request("long-urgent", 500, priority=-1))
    scheduler.add_request(make_request("short", 20, priority=0))
    assert run_step(scheduler).num_scheduled_tokens == {"d": 1, "long-urgent": 64}


def test_without_a_decode_vllm_order_stays(build: Callable[..., Scheduler]) -> None:
    plain, dlfp = build(Scheduler), build(DLFPScheduler, FIXED_64)
    for scheduler in (plain, dlfp):
        scheduler.add_request(make_request("long", 1500))
        scheduler.add_request(make_request("short", 30))
    assert run_step(dlfp).num_scheduled_tokens == run_step(plain).num_scheduled_tokens


def candidate(name: str, remaining: int, is_running: bool) -> Candidate:
    return Candidate(name, 0, remaining, is_running)


def test_select_shrinks_the_threshold_for_a_running_boundary() -> None:
    chosen = select([candidate("w", 40, False), candidate("r", 2000, True)], 128)
    assert (chosen.waiting, chosen.running, chosen.threshold_tokens) == (["w"], ["r"], 88)
    # When the boundary's share would cut another chosen request, it waits a step.
    held = select([candidate("w", 100, False), candidate("r", 2000, True)], 128)
    assert (held.waiting, held.running, held.held_running) == (["w"], [], ["r"])


@pytest.mark.parametrize(
    ("deadlines", "rate"),
    [
        ([], 0.0),
        ([(10.0, 100)], 10.0),
        # EDF: 100 by 10 s, then 100 + 300 by 20 s: the second binds.
        ([(20.0, 300), (10.0, 100)], 20.0),
        # A short one due soon binds before a long one due late.
        ([(2.0, 50), (40.0, 400)], 25.0),
        # A deadline already past is overdue, not counted.
        ([(-1.0, 1000), (10.0, 100)], 10.0),
    ],
)
def test_the_rate_the_ttft_deadlines_need_is_edfs(
    deadlines: list[tuple[float, int]], rate: float
) -> None:
    assert needed_rate(deadlines, 0.0) == pytest.approx(rate)


@pytest.mark.parametrize(
    ("deadline_s", "now_s", "paced_s"),
    [
        # 5% of a 30 s objective before the deadline.
        (30.0, 0.0, 28.5),
        (30.0, 27.0, 28.5),
        # Within twice the guard of it, half the time left.
        (30.0, 28.0, 29.0),
        (30.0, 29.0, 29.5),
        # Past the deadline, past too.
        (30.0, 31.0, 30.5),
    ],
)
def test_a_prompt_is_paced_to_a_guard_before_its_ttft_deadline(
    deadline_s: float, now_s: float, paced_s: float
) -> None:
    assert paced_deadline(deadline_s, 30.0, now_s) == pytest.approx(paced_s)
    assert needed_rate([(paced_deadline(deadline_s, 30.0, now_s), 100)], now_s) == (
        pytest.approx(100 / (paced_s - now_s)) if deadline_s > now_s else 0.0
    )
