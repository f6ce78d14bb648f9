"""Admission through HTTP on the FAKE engine: 429s, Retry-After, /admin/admission."""

from __future__ import annotations

import asyncio

from tests.fakes import FakeEngine
from tests.http_helpers import fake_client

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20}


async def test_overflow_gets_429_with_retry_after() -> None:
    engine = FakeEngine(delay_s=0.02)
    # One client: its share of the queue made whole, so the queue itself overflows.
    settings = {"max_client_queue_share": 1.0, "max_queue_wait_s": 5}
    async with fake_client(engine, max_concurrent=2, max_queue=1, **settings) as (
        client,
        _,
        _,
    ):
        replies = await asyncio.gather(
            *[client.post("/v1/chat/completions", json=CHAT) for _ in range(6)]
        )
        codes = sorted(r.status_code for r in replies)
        assert codes.count(200) == 3 and codes.count(429) == 3
        for r in replies:
            if r.status_code == 429:
                assert int(r.headers["retry-after"]) >= 1
                assert r.json()["error"]["type"] == "rate_limit_error"
        metrics = (await client.get("/metrics")).text
        assert 'dlfp_admission_rejections_total{reason="queue_full"} 3.0' in metrics
        assert 'dlfp_requests_total{endpoint="chat",outcome="shed"} 3.0' in metrics
        assert "dlfp_active_requests 0.0" in metrics and "dlfp_queued_requests 0.0" in metrics


async def test_admin_admission_get_patch_validate() -> None:
    async with fake_client(admin_token="t") as (client, app, _):
        auth = {"Authorization": "Bearer t"}
        assert (await client.get("/admin/admission")).status_code == 401
        view = (await client.get("/admin/admission", headers=auth)).json()
        assert view["settings"]["max_concurrent"] == 32 and view["state"]["num_active"] == 0
        r = await client.patch("/admin/admission", json={"max_concurrent": 0}, headers=auth)
        assert r.status_code == 422
        r = await client.patch(
            "/admin/admission", json={"max_concurrent": 3, "max_queue": 0}, headers=auth
        )
        assert r.status_code == 200 and r.json()["settings"]["max_concurrent"] == 3
        assert app.state.gateway.admission.limits.max_queue == 0


async def test_priority_header_validated() -> None:
    async with fake_client() as (client, _, _engine):
        r = await client.post("/v1/chat/completions", json=CHAT, headers={"X-Priority": "high"})
        assert r.status_code == 400
        r = await client.post("/v1/chat/completions", json=CHAT, headers={"X-Priority": "3"})
        assert r.status_code == 200


async def test_draining_refuses_with_503() -> None:
    async with fake_client() as (client, app, _):
        app.state.gateway.serving.start_draining()
        r = await client.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 503 and "retry-after" in r.headers
        assert (await client.get("/ready")).status_code == 503
