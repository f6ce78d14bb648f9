"""The deadline plan in vLLM's real ``Scheduler``, built in-process (``scheduler_helpers``).

The cost model is fitted beforehand on a made-up plant, 100 ms a step plus 10 ms
a decode and 10 ms a prefill token, so the plan's arithmetic is known: with two
decodes and the starting margin of 1.5, a step fits ``itl_slo / 1.5`` seconds.
The fake model runner takes microseconds, which the few steps after the fit do
not teach the model.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench.lib.plant import ContextPlant
from engine_worker.contract.dlfp_config import ControllerMode, DLFPConfig
from engine_worker.controller.cost_model import StepShape, chunk_attention
from engine_worker.engine_core.scheduler import DLFPScheduler, DLFPSchedulerMixin
from tests.scheduler_helpers import build_scheduler, make_request, run_step

PLANT = ContextPlant(
    base_s=0.1, decode_s=0.01, prefill_s_per_token=0.01, attention_s_per_token2=0.0, noise=0.0
)
"""100 ms a step, 10 ms a decode and 10 ms a prefill token."""


def decoding(
    model_dir: Path, *, with_partial_prefill: bool = False, **settings: float | str
) -> DLFPSchedulerMixin:
    """Two streams decoding (and a 1,000-token prompt part-way), then the model fitted."""
    config = DLFPConfig(controller=ControllerMode.DLFP_CT, **settings)  # type: ignore[arg-type]
    scheduler = build_scheduler(model_dir, DLFPScheduler, config)
    assert isinstance(scheduler, DLFPSchedulerMixin)
    scheduler.add_request(make_request("d1", 10, max_tokens=100))
    scheduler.add_request(make_request("d2", 10, max_tokens=100))
    if with_partial_prefill:
        scheduler.add_request(make_request("q", 1000, max_tokens=100))
    run_step(scheduler)
    run_step(scheduler)
    scheduler.dlfp_reset(model=True)  # forget the microsecond steps of the fake runner
    controller = scheduler.dlfp_controller
    for index in range(60):
        chunk, num_decode, context = 8 + 7 * index, 1 + index % 4, 50 * (index % 7)
        mixed = StepShape(num_decode, context, chunk, chunk_attention(0, chunk))
        for shape in (mixed, StepShape(num_decode, context)):
            controller.observe_model(shape, PLANT.exact_s(shape))
            controller.cost_model.predict_s(shape)  # as the planner does between steps
    assert scheduler.dlfp_controller.state.cost_model_ready
    return scheduler


def prefill_tokens(scheduled: dict[str, int]) -> dict[str, int]:
    return {r: n for r, n in scheduled.items() if r not in ("d1", "d2")}


def test_nothing_fits_no_prefill_while_every_decode_keeps_its_token(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 100 ms / 1.5 cannot hold even the two decodes' 120 ms; the slack short only now (a
    # step ran long), not for want of any beside the decodes' tail.
    scheduler = decoding(model_dir, with_partial_prefill=True, itl_slo_ms=100)
    plan = scheduler.dlfp_controller._deadline_plan
    monkeypatch.setattr(plan, "_lacks_slack", lambda *args: False)
    monkeypatch.setattr(plan, "_end_lacks_slack", lambda *args: False)
    scheduler.add_request(make_request("p", 200))
    before = scheduler.dlfp_controller.state.num_zero_prefill_steps
    scheduled = run_step(scheduler).num_scheduled_tokens
    assert scheduled == {"d1": 1, "d2": 1}
    assert scheduler.dlfp_controller.state.num_zero_prefill_steps == before + 1
    assert scheduler.dlfp_controller.state.cap_tokens == 0
    # The held prefills are back in their queues, and are served once the plan fits.
    assert [r.request_id for r in scheduler.running] == ["d1", "d2", "q"]
    assert [r.request_id for r in scheduler.waiting] == ["p"]
    scheduler.dlfp_apply_config(
        scheduler.dlfp_config.model_copy(update={"itl_slo_ms": 2000.0}).model_dump()
    )
    assert prefill_tokens(run_step(scheduler).num_scheduled_tokens)


def test_no_slack_beside_the_decodes_tail_moves_prefill_at_the_floor(model_dir: Path) -> None:
    """Where the objective leaves no slack even right after a token, the step carries
    ``min_cap_tokens`` (as the tightest static cap would), not nothing for ever."""
    scheduler = decoding(model_dir, with_partial_prefill=True, itl_slo_ms=100)
    scheduler.add_request(make_request("p", 200))
    state = scheduler.dlfp_controller.state
    scheduled = run_step(scheduler).num_scheduled_tokens
    after = scheduler.dlfp_controller.state
    assert sum(prefill_tokens(scheduled).values()) == scheduler.dlfp_params.min_cap_tokens
    assert after.num_floor_steps == state.num_floor_steps + 1
    assert after.num_zero_prefill_steps == state.num_zero_prefill_steps


def test_a_prefill_past_its_ttft_deadline_is_not_forced_beyond_the_slack(
    model_dir: Path,
) -> None:
    scheduler = decoding(model_dir, with_partial_prefill=True, itl_slo_ms=100)
    late = make_request("p", 200)
    late.arrival_time = time.time() - 31.0  # ttft_slo_ms is 30 s
    scheduler.add_request(late)
    scheduled = run_step(scheduler).num_scheduled_tokens
    # No slack: counted as overdue, and it moves at the floor, not the whole prompt.
    assert sum(prefill_tokens(scheduled).values()) == scheduler.dlfp_params.min_cap_tokens
    assert scheduler.dlfp_controller.state.num_ttft_overdue_steps == 1


def test_a_one_token_step_reaches_the_scheduler_output(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No floor between the plan and vLLM: a slack of one token is one token scheduled."""
    scheduler = decoding(model_dir, with_partial_prefill=True, itl_slo_ms=500)
    slack = scheduler.dlfp_controller._deadline_plan.slack
    monkeypatch.setattr(slack, "budget_tokens", lambda *args: (1, 0.5))
    scheduled = run_step(scheduler).num_scheduled_tokens
    assert scheduled == {"d1": 1, "d2": 1, "q": 1}
    assert scheduler.dlfp_controller.state.cap_tokens == 1


@pytest.mark.parametrize(
    ("arrived_s_ago", "first"),
    [
        (5.0, "long"),  # 25 s left: 20 s alone, about 30 s at the slack's rate: at risk
        (15.0, "short"),  # 15 s left, 20 s alone: out of reach, served last
        (-20.0, "short"),  # 50 s left: on time, shortest first
    ],
)
def test_a_long_prompt_at_risk_goes_first_and_one_out_of_reach_last(
    model_dir: Path, arrived_s_ago: float, first: str
) -> None:
    scheduler = decoding(model_dir, itl_slo_ms=500)
    # As after a bound step: about 33 tokens a 0.5 s step.
    scheduler.dlfp_controller._deadline_plan.slack_rate_tokens_per_s = 66.0
    long = make_request("long", 2000)
    long.arrival_time = time.time() - arrived_s_ago
    scheduler.add_request(long)
    scheduler.add_request(make_request("short", 50))
    served = prefill_tokens(run_step(scheduler).num_scheduled_tokens)
    # (0.5 s - 120 ms of decodes) / 10 ms a token: at most 38 tokens, less the time
    # since the streams' last tokens.
    assert list(served) == [first]
    assert 28 <= sum(served.values()) <= 38, served


def test_a_step_completing_a_short_prefill_carries_no_other_prefill(model_dir: Path) -> None:
    # 2 s / 1.5 leaves room for about 113 prefill tokens: the short prompt's 20 and
    # then 88 of the long one's, but the step ends with the completed prompt.
    scheduler = decoding(model_dir, itl_slo_ms=2000)
    scheduler.add_request(make_request("long", 2000))
    scheduler.add_request(make_request("short", 20))
    assert prefill_tokens(run_step(scheduler).num_scheduled_tokens) == {"short": 20}
    assert prefill_tokens(run_step(scheduler).num_scheduled_tokens)["long"] > 20


def test_target_plan_stretches_the_same_step(model_dir: Path) -> None:
    scheduler = decoding(model_dir, itl_slo_ms=2000, target_ms=1300, plan="target")
    scheduler.add_request(make_request("long", 2000))
    scheduler.add_request(make_request("short", 20))
    served = prefill_tokens(run_step(scheduler).num_scheduled_tokens)
    assert served["short"] == 20 and served["long"] > 0


@pytest.mark.parametrize(
    ("prompts", "tokens", "floor_reason"),
    [
        # 4,000 tokens due in 25 s need 160 a second; 3 tokens a step give about 20.
        ({"long": 2000, "long2": 2000}, 8, "ttft_at_risk"),
        # 50 tokens due in 25 s need 2 a second: the slack's 3 tokens a step keep it.
        ({"short": 50}, 3, None),
    ],
)
def test_a_budget_under_the_floor_that_would_miss_a_ttft_deadline_goes_at_the_floor(
    model_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    prompts: dict[str, int],
    tokens: int,
    floor_reason: str | None,
) -> None:
    """The scheduler reads the rate the waiting prompts' TTFT deadlines need (earliest
    first) once the plan's budget was under ``min_cap_tokens``, and the plan goes at the
    floor where its own rate falls short of it."""
    scheduler = decoding(model_dir, itl_slo_ms=500)
    plan = scheduler.dlfp_controller._deadline_plan
    plan.wants_ttft_rate = True  # as after a step whose budget was under the floor
    monkeypatch.setattr(plan.slack, "budget_tokens", lambda *args: (3, 0.0))
    for request_id, num_tokens in prompts.items():
        request = make_request(request_id, num_tokens)
        request.arrival_time = time.time() - 5.0
        scheduler.add_request(request)
    served = prefill_tokens(run_step(scheduler).num_scheduled_tokens)
    assert sum(served.values()) == tokens, served
    assert scheduler._dlfp_steps[-1].floor_reason == floor_reason


@pytest.mark.parametrize(
    ("asks", "slack_rate", "prefill_order", "rate"),
    [
        # 1,000 tokens due in 25 s: 40 a second (paced to 1.5 s, 5% of 30 s, before it:
        # 1,000 in 23.5 s); the prompt out of reach (2,000 tokens, 20 s alone, 1 s left)
        # is left out.
        (True, None, "srpf", 40.0),
        # The plan does not ask, but 10 tokens a second would not finish the 1,000 by 25 s:
        # at risk, so read.
        (False, 10.0, "srpf", 40.0),
        (False, None, "srpf", None),  # the plan does not ask, none at risk: not read
        (True, None, "fcfs", None),  # no TTFT classes under fcfs: not read
    ],
)
def test_the_ttft_deadlines_rate_is_read_where_the_plan_asks_or_a_prompt_is_at_risk(
    model_dir: Path, asks: bool, slack_rate: float | None, prefill_order: str, rate: float | None
) -> None:
    scheduler = decoding(model_dir, itl_slo_ms=500, prefill_order=prefill_order)
    plan = scheduler.dlfp_controller._deadline_plan
    now = time.time()
    reachable, out_of_reach = make_request("reachable", 1000), make_request("late", 2000)
    reachable.arrival_time, out_of_reach.arrival_time = now - 5.0, now - 29.0
    scheduler.add_request(reachable)
    scheduler.add_request(out_of_reach)
    plan.wants_ttft_rate = asks  # as the latest planned step left it
    plan.slack_rate_tokens_per_s = slack_rate
    scheduler._prefill_candidates(now)
    if rate is None:
        assert scheduler._ttft_needed_rate is None
        assert scheduler._ttft_paced_rate is None
    else:
        assert scheduler._ttft_needed_rate == pytest.approx(rate, rel=1e-3)
        assert scheduler._ttft_paced_rate == pytest.approx(1000 / 23.5, rel=1e-3)
