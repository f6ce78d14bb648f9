"""``bench tenants`` and ``bench admission-cost`` (quick tier, no engine, no gateway).

The report's arithmetic runs on canned metric texts; the scenarios run against a FAKE
gateway with tenants (``FakeTenantGateway``, on ``tests/fake_openai_server.py``'s fake);
the admission-cost harness runs on a small queue. No timing is asserted.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from bench.cli import main as bench_main
from bench.harness.admission_cost import Settings, format_result, measure
from bench.tenants import metrics as m
from bench.tenants.admin import patched
from bench.tenants.base import Outcome, Run, TenantKey, TenantRecord, TenantsOptions, parse_tenant
from bench.tenants.report import format_outcome, tenant_reports, weight_ratios
from bench.tenants.scenarios import SCENARIOS
from bench.tenants.token_rate import judge_token_rate
from bench.tenants.trickle import judge_trickle
from tests.fake_openai_server import ADMIN_TOKEN, MODEL, FakeOpenAIServer, serving

BUCKETS = (0.01, 0.1, 1.0, float("inf"))
KEYS = {"sk-a": "a", "sk-b": "b"}


def _exposition(
    slot_s: dict[str, float], tokens: dict[str, float], waits: dict[str, list[int]]
) -> str:
    """A canned ``/metrics`` text: counters per tenant, cumulative queue-wait buckets."""
    lines = ["# HELP dlfp_tenant_slot_seconds_total slot-seconds held"]
    for tenant in slot_s:
        lines.append(f'dlfp_tenant_slot_seconds_total{{tenant="{tenant}"}} {slot_s[tenant]}')
        lines.append(f'dlfp_tenant_completion_tokens_total{{tenant="{tenant}"}} {tokens[tenant]}')
        lines.append(
            f'dlfp_tenant_requests_total{{outcome="ok",tenant="{tenant}"}} {tokens[tenant] / 10}'
        )
        for le, count in zip(BUCKETS, waits[tenant], strict=True):
            bound = "+Inf" if le == float("inf") else str(le)
            lines.append(
                f'dlfp_tenant_queue_wait_seconds_bucket{{tenant="{tenant}",le="{bound}"}} {count}'
            )
    return "\n".join(lines) + "\n"


BEFORE = _exposition(
    {"a": 10.0, "b": 5.0}, {"a": 100.0, "b": 50.0}, {"a": [0, 0, 0, 0], "b": [1, 1, 1, 1]}
)
AFTER = _exposition(
    {"a": 310.0, "b": 105.0}, {"a": 400.0, "b": 150.0}, {"a": [2, 6, 10, 10], "b": [1, 1, 3, 5]}
)


def test_metric_deltas_give_each_tenants_share_and_quantiles() -> None:
    before, after = m.parse_series(BEFORE), m.parse_series(AFTER)
    slot_s = m.delta_by_tenant(before, after, m.SLOT_SECONDS)
    assert slot_s == {"a": 300.0, "b": 100.0}
    assert m.shares(slot_s, ("a", "b")) == {"a": 0.75, "b": 0.25}
    assert m.shares({}, ("a", "b")) == {"a": None, "b": None}
    buckets = m.bucket_delta(before, after, m.QUEUE_WAIT, "a")
    assert buckets == [(0.01, 2.0), (0.1, 6.0), (1.0, 10.0), (float("inf"), 10.0)]
    # rank 5 of 10 lies in (0.01, 0.1]: 3 of its 4 observations up.
    assert m.histogram_quantile(buckets, 0.5) == pytest.approx(0.01 + 0.09 * 3 / 4)
    # b's P95 falls in +Inf: the largest finite bound.
    assert m.histogram_quantile(m.bucket_delta(before, after, m.QUEUE_WAIT, "b"), 0.95) == 1.0
    assert m.histogram_quantile([], 0.5) is None


def test_weight_ratio_aim_is_met_within_the_tolerance_only() -> None:
    weights = {"a": 3.0, "b": 1.0}
    assert weight_ratios({"a": 290.0, "b": 100.0}, weights, 0.10) == ({"a": 2.9}, True)
    assert weight_ratios({"a": 250.0, "b": 100.0}, weights, 0.10) == ({"a": 2.5}, False)
    assert weight_ratios({"a": 290.0, "b": None}, weights, 0.10) == ({"a": None}, None)
    three = {"a": 3.0, "b": 1.0, "c": 2.0}
    ratios, met = weight_ratios({"a": 300.0, "b": 100.0, "c": 150.0}, three, 0.10)
    assert ratios == {"a": 3.0, "c": 1.5} and met is False


def _record(tenant: str, **fields: Any) -> TenantRecord:
    return TenantRecord(tenant, fields.pop("kind", "flood"), 64, 0.0, **fields)


def test_tenant_reports_combine_records_and_metric_deltas() -> None:
    records = [
        _record("a", status=200, is_complete=True, ttft_s=0.1, completion_tokens=64),
        _record("a", status=200, is_complete=True, ttft_s=0.3, completion_tokens=64),
        _record("b", status=429, code="tenant_tokens_per_minute", retry_after_s=3.0),
        _record("b", status=200, code="cut"),
    ]
    outcome = Outcome(
        "weights", ("a", "b"), records=records, window_s=10.0, before=BEFORE, after=AFTER
    )
    a, b = tenant_reports(outcome, {"a": 3.0, "b": 1.0})
    assert (a["slot_share"], b["slot_share"], a["token_share"]) == (0.75, 0.25, 0.75)
    assert (a["num_ok"], a["requests_per_s"], a["tokens_per_s"]) == (2, 0.2, 12.8)
    assert a["ttft_ms"] == {"p50": 200.0, "p95": 290.0}
    assert b["refused"] == {"429 tenant_tokens_per_minute": 1} and b["num_cut"] == 1
    assert a["queue_wait_ms"]["count"] == 10 and a["outcomes"] == {"ok": 30}
    outcome.reports, outcome.aim, outcome.met = [a, b], "ratio", False
    table = format_outcome(outcome)
    assert "aim: ratio: MISSED" in table and "75.0%" in table
    no_metrics = tenant_reports(replace(outcome, before=None, after=None))
    assert no_metrics[0]["slot_share"] is None and no_metrics[0]["token_share_from"] == "client"


def test_trickle_and_token_rate_verdicts() -> None:
    fast = [_record("b", kind="trickle", status=200, ttft_s=0.5, is_complete=True)] * 3
    assert judge_trickle(fast, 5.0)[0] is True
    late = [*fast, _record("b", kind="trickle", status=200, ttft_s=6.0)]
    met, line, figures = judge_trickle(late, 5.0)
    assert not met and figures["num_late"] == 1 and "1 at or over 5 s" in line
    refused = [*fast, _record("b", kind="trickle", status=429, code="slo")]
    assert judge_trickle(refused, 5.0)[2]["not_admitted"] == {"429 slo": 1}
    refusal = _record("a", status=429, code="tenant_tokens_per_minute", retry_after_s=2.0)
    ok = _record("a", kind="retry", status=200, is_complete=True)
    assert judge_token_rate([], refusal, ok)[0] is True
    assert judge_token_rate([], replace(refusal, retry_after_s=None), None)[0] is False
    assert judge_token_rate([], None, None)[1].startswith("no 429")


def test_a_tenant_is_given_as_name_and_key() -> None:
    assert parse_tenant("search=sk-1") == TenantKey("search", "sk-1")
    with pytest.raises(ValueError, match="NAME=API_KEY"):
        parse_tenant("search")


@dataclass
class FakeTenantGateway(FakeOpenAIServer):
    """A FAKE gateway with two tenants: a slot limit shared by both, per-tenant metrics,
    the admin tenants routes and a token rate that refuses with Retry-After 1."""

    max_concurrent: int = 2
    limits: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {t: {"weight": 1.0, "tokens_per_minute": None} for t in "ab"}
    )
    tenant_patches: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    slot_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys("ab", 0.0))
    in_use: dict[str, int] = field(default_factory=lambda: dict.fromkeys("ab", 0))
    tokens: dict[str, float] = field(default_factory=lambda: dict.fromkeys("ab", 0.0))
    waits: dict[str, list[float]] = field(default_factory=lambda: {"a": [], "b": []})
    used: dict[str, int] = field(default_factory=lambda: dict.fromkeys("ab", 0))
    reopens_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys("ab", 0.0))
    _slots: asyncio.Semaphore | None = None

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/models", self.models),
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/metrics", self.tenant_metrics),
                Route("/admin/dlfp", self.settings, methods=["GET"]),
                Route("/admin/admission", self.admission, methods=["GET"]),
                Route("/admin/tenants", self.tenants, methods=["GET"]),
                Route("/admin/tenants/{name}", self.patch, methods=["PATCH"]),
            ]
        )

    def _admin(self, request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {ADMIN_TOKEN}"

    async def admission(self, request: Request) -> Response:
        return JSONResponse({"settings": {"max_concurrent": self.max_concurrent}})

    async def tenants(self, request: Request) -> Response:
        if not self._admin(request):
            return JSONResponse({"error": {"message": "admin token"}}, status_code=401)
        entries = [
            {"name": t, "limits": lim, "use": {"slots": self.in_use[t], "queued": 0}}
            for t, lim in self.limits.items()
        ]
        return JSONResponse({"tenants": entries})

    async def patch(self, request: Request) -> Response:
        name = request.path_params["name"]
        if not self._admin(request) or name not in self.limits:
            return JSONResponse({"error": {"message": "no"}}, status_code=404)
        fields = await request.json()
        self.tenant_patches.append((name, fields))
        self.limits[name] = self.limits[name] | fields
        return JSONResponse({"name": name, "limits": self.limits[name]})

    async def tenant_metrics(self, request: Request) -> Response:
        lines = []
        for t in "ab":
            lines += [
                f'dlfp_tenant_slot_seconds_total{{tenant="{t}"}} {self.slot_s[t]}',
                f'dlfp_tenant_slots_in_use{{tenant="{t}"}} {self.in_use[t]}',
                f'dlfp_tenant_completion_tokens_total{{tenant="{t}"}} {self.tokens[t]}',
            ]
            for le in BUCKETS:
                count = sum(w <= le for w in self.waits[t])
                bound = "+Inf" if le == float("inf") else le
                lines.append(
                    f'dlfp_tenant_queue_wait_seconds_bucket{{tenant="{t}",le="{bound}"}} {count}'
                )
        return PlainTextResponse("\n".join(lines) + "\n")

    async def chat(self, request: Request) -> Response:
        tenant = KEYS.get(request.headers.get("authorization", "").removeprefix("Bearer "))
        body = await request.json()
        if tenant is None:
            return JSONResponse({"error": {"message": "bad key"}}, status_code=401)
        limit = self.limits[tenant].get("tokens_per_minute")
        if 0 < self.reopens_s[tenant] <= time.monotonic():  # the refusal's Retry-After passed
            self.used[tenant], self.reopens_s[tenant] = 0, 0.0
        needed = 10 + int(body["max_tokens"])
        if limit is not None and self.used[tenant] + needed > limit:
            self.reopens_s[tenant] = time.monotonic() + 1.0
            error = {"message": f"tenant {tenant!r} is over its tokens_per_minute ({limit})"}
            error["code"] = "tenant_tokens_per_minute"
            return JSONResponse({"error": error}, status_code=429, headers={"Retry-After": "1"})
        self.used[tenant] += needed
        return StreamingResponse(self._held(tenant, body), media_type="text/event-stream")

    async def _held(self, tenant: str, body: dict[str, Any]) -> AsyncIterator[str]:
        self._slots = self._slots or asyncio.Semaphore(self.max_concurrent)
        queued = time.monotonic()
        async with self._slots:
            start = time.monotonic()
            self.waits[tenant].append(start - queued)
            self.in_use[tenant] += 1
            try:
                async for event in self._events(body, True, "prompt"):
                    yield event
                self.tokens[tenant] += int(body["max_tokens"])
            finally:
                self.in_use[tenant] -= 1
                self.slot_s[tenant] += time.monotonic() - start


@pytest.fixture
def fake_gateway() -> Iterator[FakeTenantGateway]:
    with serving(FakeTenantGateway(delay_s=0.01)) as fake:
        yield fake


def _options(fake: FakeTenantGateway, **fields: Any) -> TenantsOptions:
    tenants = (TenantKey("a", "sk-a"), TenantKey("b", "sk-b"))
    base = TenantsOptions(fake.base_url, tenants, admin_token=ADMIN_TOKEN, model=MODEL)
    return replace(
        base, duration_s=1.0, max_tokens=4, progress_s=0.5, max_rate_requests=20, **fields
    )


async def _scenario(name: str, options: TenantsOptions) -> Outcome:
    async with httpx.AsyncClient(base_url=options.base_url, timeout=30.0) as client:
        return await SCENARIOS[name](Run(client, MODEL, options, random.Random(0)))


def test_trickle_floods_one_tenant_and_times_the_others_requests(
    fake_gateway: FakeTenantGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("bench.tenants.trickle.LEAD_S", 0.1)
    outcome = asyncio.run(_scenario("trickle", _options(fake_gateway, trickle_interval_s=0.25)))
    trickled = [r for r in outcome.records if r.kind == "trickle"]
    assert {r.tenant for r in trickled} == {"b"} and len(trickled) == 4
    assert outcome.figures["flood_streams"] == 4  # the gateway's 2 slots and 2 more
    assert outcome.met is (
        outcome.figures["num_admitted"] == 4 and outcome.figures["num_late"] == 0
    )
    a, b = outcome.reports
    assert a["num_ok"] > 0 and a["num_cut"] > 0 and b["num_ok"] == 4
    assert a["slot_share"] + b["slot_share"] == pytest.approx(1.0)
    assert fake_gateway.in_use == {"a": 0, "b": 0}


def test_weights_sets_the_weights_and_restores_them(fake_gateway: FakeTenantGateway) -> None:
    outcome = asyncio.run(_scenario("weights", _options(fake_gateway)))
    assert fake_gateway.tenant_patches == [
        ("a", {"weight": 3.0}),
        ("b", {"weight": 1.0}),
        ("a", {"weight": 1.0}),
        ("b", {"weight": 1.0}),
    ]
    assert set(outcome.figures["slot_seconds_ratio"]) == {"a"}
    assert outcome.met is not None and "a/b" in outcome.verdict
    assert all(r["slot_seconds"] > 0 for r in outcome.reports)


def test_limits_are_restored_when_the_body_fails(fake_gateway: FakeTenantGateway) -> None:
    async def failing() -> None:
        async with httpx.AsyncClient(base_url=fake_gateway.base_url) as client:
            run = Run(client, MODEL, _options(fake_gateway))
            async with patched(run, {"b": {"tokens_per_minute": 5}}):
                raise RuntimeError("the load failed")

    with pytest.raises(RuntimeError, match="the load failed"):
        asyncio.run(failing())
    assert fake_gateway.tenant_patches[-1] == ("b", {"tokens_per_minute": None})


def test_token_rate_retries_after_the_refusal(fake_gateway: FakeTenantGateway) -> None:
    outcome = asyncio.run(_scenario("token-rate", _options(fake_gateway, tokens_per_minute=100)))
    assert outcome.met is True, outcome.verdict
    assert outcome.figures["retry_after_s"] == 1.0 and outcome.figures["retry_status"] == 200
    assert [r.kind for r in outcome.records][-2:] == ["probe", "retry"]
    assert fake_gateway.limits["a"]["tokens_per_minute"] is None


def test_the_command_writes_json_with_host_date_and_command(
    fake_gateway: FakeTenantGateway, tmp_path: Path
) -> None:
    out = tmp_path / "tenants.json"
    argv = ["tenants", "--base-url", fake_gateway.base_url, "--admin-token", ADMIN_TOKEN]
    argv += ["--tenant", "a=sk-a", "--tenant", "b=sk-b", "--scenarios", "token-rate"]
    status = bench_main(
        [*argv, "--tokens-per-minute", "60", "--rate-max-tokens", "4", "--out", str(out)]
    )
    result = json.loads(out.read_text())
    assert status == 0 and result["met"] is True
    assert {"cpu_model", "cpu_family_model"} <= set(result["host"]) and result["date"]
    assert result["options"]["tenants"] == ["a", "b"] and "admin_token" not in result["options"]
    assert result["scenarios"][0]["metrics_after"][0].startswith("dlfp_tenant_")
    assert bench_main([*argv, "--weights", "3,1,1", "--scenarios", "weights"]) == 1  # not run


def test_admission_cost_returns_per_request_timings() -> None:
    settings = Settings(
        num_tenants=2, num_queued=20, num_arrivals=10, num_warmup=2, max_concurrent=4
    )
    result = asyncio.run(measure(settings))
    assert [len(result["raw_ns"][k]) for k in ("reserve", "arrival", "release")] == [10, 10, 10]
    assert all(v > 0 for v in result["raw_ns"]["arrival"])
    assert result["predicted_ttft_s"] > 0 and isinstance(result["met"], bool)
    assert "per request" in format_result(result)
