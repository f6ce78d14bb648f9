"""Objectives per request (quick tier; the HTTP tests on the FAKE engine): the body's
``ttft_slo_ms`` and ``itl_slo_ms`` within bounds, refused out of them, and taking
precedence over the tenant's and the gateway's; what travels to the engine; goodput by
where the objectives came from; and the deadline plan holding each stream to its own
objective."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine_worker.client.request_stream import _objective_args
from engine_worker.contract.api import ITL_SLO_ARG, TTFT_SLO_ARG, SamplingOptions
from engine_worker.controller.cap_controller import PrefillCapController
from engine_worker.controller.cost_model import StepShape
from gateway.objectives import resolve
from gateway.tenant_limits import TenantLimits
from tests.cap_params import cap_params
from tests.fake_clock import FakeClock
from tests.http_helpers import fake_client

CHAT: Any = {"model": "fake-model", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]}
TENANTS = """\
[[tenant]]
name = "chat"
keys = ["sk-chat"]
ttft_slo_ms = 2000
itl_slo_ms = 150

[[tenant]]
name = "plain"
keys = ["sk-plain"]
"""


def test_the_request_wins_over_its_tenant_which_wins_over_the_gateway() -> None:
    tenant = TenantLimits(ttft_slo_ms=2000, itl_slo_ms=150)
    own = resolve(800, None, tenant, 30_000, 500)
    assert (own.ttft_slo_ms, own.itl_slo_ms, own.source) == (800, 150, "request")
    assert (own.own_ttft_slo_ms, own.own_itl_slo_ms) == (800, 150)
    tenants = resolve(None, None, tenant, 30_000, 500)
    assert (tenants.ttft_slo_ms, tenants.itl_slo_ms, tenants.source) == (2000, 150, "tenant")
    gateway = resolve(None, None, TenantLimits(), 30_000, 500)
    assert (gateway.ttft_slo_ms, gateway.itl_slo_ms, gateway.source) == (30_000, 500, "gateway")
    assert (gateway.own_ttft_slo_ms, gateway.own_itl_slo_ms) == (None, None)


def test_met_takes_the_ttft_and_at_most_one_gap_in_a_hundred_above_the_objective() -> None:
    objectives = resolve(1000, 100, TenantLimits(), 30_000, 500)

    def met(ttft_s: float, gaps_s: list[float]) -> bool:
        late = sum(objectives.is_late(gap_s) for gap_s in gaps_s)
        return objectives.met(ttft_s, len(gaps_s), late)

    assert met(0.9, [0.05] * 99 + [0.3])
    assert not met(0.9, [0.05] * 98 + [0.3, 0.3])
    assert not met(1.1, [0.05] * 10)
    assert met(0.5, [])
    assert objectives.is_late(0.101) and not objectives.is_late(0.1)


def test_own_objectives_travel_in_extra_args_and_the_gateways_do_not() -> None:
    options = SamplingOptions(max_tokens=4, ttft_slo_ms=800, itl_slo_ms=90)
    assert _objective_args(options) == {TTFT_SLO_ARG: 800, ITL_SLO_ARG: 90}
    assert _objective_args(SamplingOptions(max_tokens=4)) is None


@pytest.mark.parametrize(
    ("field", "value"), [("ttft_slo_ms", 50), ("ttft_slo_ms", 1e9), ("itl_slo_ms", 5)]
)
async def test_an_objective_out_of_bounds_is_refused(field: str, value: float) -> None:
    async with fake_client() as (client, _, engine):
        r = await client.post("/v1/chat/completions", json=CHAT | {field: value})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == field
        assert engine.submitted == []


async def test_objectives_reach_the_engine_and_goodput_counts_by_source(tmp_path: Path) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text(TENANTS)
    async with fake_client(tenants_file=path) as (client, _, engine):
        chat = {"Authorization": "Bearer sk-chat"}
        plain = {"Authorization": "Bearer sk-plain"}
        for body, headers in (
            (CHAT | {"itl_slo_ms": 60}, chat),  # its own ITL, its tenant's TTFT
            (CHAT, chat),
            (CHAT, plain),
            (
                {"model": "fake-model", "input": "x", "max_output_tokens": 4, "ttft_slo_ms": 900},
                plain,
            ),
        ):
            path_ = "/v1/responses" if "input" in body else "/v1/chat/completions"
            r = await client.post(path_, json=body, headers=headers)
            assert r.status_code == 200, r.text
        sent = [(o.ttft_slo_ms, o.itl_slo_ms) for _, _, o, _ in engine.submitted]
        assert sent == [(2000, 60), (2000, 150), (None, None), (900, None)]
        metrics = (await client.get("/metrics")).text
        counted = {
            source: sum(
                float(line.rsplit(" ", 1)[1])
                for line in metrics.splitlines()
                if line.startswith("dlfp_goodput_requests_total{") and f'source="{source}"' in line
            )
            for source in ("request", "tenant", "gateway")
        }
        assert counted == {"request": 2.0, "tenant": 1.0, "gateway": 1.0}, metrics


def test_the_plan_holds_each_stream_to_its_own_objective() -> None:
    """Two streams, one on the gateway's 500 ms and one with 150 ms of its own: the
    tighter binds the plan, so the step carries fewer prefill tokens than under 500 ms
    alone, and its deadline is the 150 ms stream's."""
    clock = FakeClock()
    controller = PrefillCapController(cap_params(itl_slo_ms=500.0), clock=clock, wall_clock=clock)
    slack = controller._deadline_plan.slack
    for n in range(40):  # a plant: 40 ms decodes, 1 ms a prefill token
        slack.observe(StepShape(2, 1000), 0.040)
        slack.observe(StepShape(2, 1000, 16 + n, 0.0), 0.040 + (16 + n) * 0.001)
    controller.on_schedule(2, decode_context_tokens=1000)
    controller.on_scheduled(0, 2, shape=StepShape(2, 1000))
    clock.advance(0.04)
    controller.on_step_done()
    candidates = [(0, 10_000)]
    alone = controller.on_schedule(
        2, candidates=candidates, decode_context_tokens=1000, oldest_token_step=0
    )
    controller.on_scheduled(0, 2, shape=StepShape(2, 1000))
    clock.advance(0.04)
    controller.on_step_done()
    tight = controller.on_schedule(
        2,
        candidates=candidates,
        decode_context_tokens=1000,
        oldest_token_step=1,
        own_deadlines=[(1, 0.150)],
    )
    assert alone is not None and tight is not None
    assert 0 < tight < alone
    end_of_step_1 = 0.08
    assert controller._deadline_plan.deadline_s(clock(), 1, [(1, 0.150)]) == pytest.approx(
        end_of_step_1 + 0.150
    )
