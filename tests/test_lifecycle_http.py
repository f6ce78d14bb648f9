"""A request's life on the FAKE engine (quick tier): disconnects, ids, stream endings,
tokenization off the loop, priorities, the hung engine and inputs that once gave a 500."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

from fastapi import FastAPI

from tests.fakes import FakeEngine
from tests.http_helpers import fake_client, sse_data, sse_json

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


async def call_asgi(
    app: FastAPI, path: str, body: dict[str, Any], disconnect_after_s: float
) -> list[dict[str, Any]]:
    """POST ``body`` straight to the ASGI app; the client hangs up after a while."""
    raw = json.dumps(body).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"host", b"testserver")],
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }
    sent: list[dict[str, Any]] = []
    body_sent = False

    async def receive() -> dict[str, Any]:
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await asyncio.sleep(disconnect_after_s)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


async def test_disconnect_aborts_a_non_streamed_request() -> None:
    engine = FakeEngine(delay_s=0.05)
    async with fake_client(engine) as (client, app, _):
        body = CHAT | {"max_tokens": 200, "n": 8}
        # 200 tokens at 50 ms would take 10 s: only the abort ends it within the bound.
        await asyncio.wait_for(call_asgi(app, "/v1/chat/completions", body, 0.3), 5)
        assert engine.running == set()
        (rid, *_), *_ = engine.submitted
        assert rid in engine.aborted
        view = app.state.gateway.admission
        assert view.num_active == 0
        metrics = (await client.get("/metrics")).text
        assert 'dlfp_requests_total{endpoint="chat",outcome="aborted"} 1.0' in metrics


async def test_disconnect_aborts_a_streamed_request_after_its_first_token() -> None:
    """The response's task group is cancelled at the disconnect, and its cancellation is
    raised again at every await in it: the engine abort must not be one of those skipped."""
    engine = FakeEngine(delay_s=0.05)
    async with fake_client(engine) as (_, app, _):
        body = CHAT | {"max_tokens": 200, "stream": True}
        sent = await asyncio.wait_for(call_asgi(app, "/v1/chat/completions", body, 0.3), 5)
        assert any(b"data: " in m.get("body", b"") for m in sent)  # it streamed first
        await asyncio.sleep(0.1)
        (rid, *_), *_ = engine.submitted
        assert rid in engine.aborted
        assert engine.running == set()


async def test_same_client_request_id_gets_distinct_engine_and_completion_ids() -> None:
    engine = FakeEngine(delay_s=0.01)
    async with fake_client(engine) as (client, _, _):
        headers = {"X-Request-Id": "dup-1"}
        replies = await asyncio.gather(
            client.post("/v1/chat/completions", json=CHAT, headers=headers),
            client.post("/v1/chat/completions", json=CHAT | {"stream": True}, headers=headers),
        )
        assert [r.headers["x-request-id"] for r in replies] == ["dup-1", "dup-1"]
        ids = {replies[0].json()["id"], sse_json(replies[1].text)[0]["id"]}
        engine_ids = {s[0] for s in engine.submitted}
        assert len(ids) == 2 and ids == engine_ids
        assert all("dup-1" not in i for i in ids)
        assert replies[0].json()["usage"]["completion_tokens"] == 5
        assert sse_data(replies[1].text)[-1] == "[DONE]"


async def test_any_engine_failure_ends_the_stream_with_error_then_done() -> None:
    for failure in (RuntimeError("boom"), KeyError("x")):
        engine = FakeEngine()
        engine.fail_after_tokens = 2
        engine.failure = failure
        async with fake_client(engine) as (client, _, _):
            r = await client.post("/v1/chat/completions", json=CHAT | {"stream": True})
            data = sse_data(r.text)
            assert data[-1] == "[DONE]"
            assert "error" in json.loads(data[-2])
            metrics = (await client.get("/metrics")).text
            assert 'dlfp_requests_total{endpoint="chat",outcome="server_error"} 1.0' in metrics


async def test_drain_deadline_cuts_streams_with_error_then_done() -> None:
    engine = FakeEngine(delay_s=0.05)
    async with fake_client(engine) as (client, app, _):
        body = CHAT | {"stream": True, "max_tokens": 200}

        async def cut_soon() -> None:
            await asyncio.sleep(0.3)
            app.state.gateway.serving.cut_streams()

        cutter = asyncio.create_task(cut_soon())
        r = await asyncio.wait_for(client.post("/v1/chat/completions", json=body), 5)
        await cutter
        data = sse_data(r.text)
        assert r.status_code == 200, r.text
        assert data[-1] == "[DONE]"
        assert "error" in json.loads(data[-2])
        assert engine.running == set()
        assert app.state.gateway.admission.num_active == 0


async def test_tokenization_runs_off_the_event_loop() -> None:
    engine = FakeEngine()
    engine.tokenize_gate = threading.Event()
    async with fake_client(engine) as (client, _, _):
        body = {"model": "fake-model", "prompt": "x" * 50}
        call = asyncio.create_task(client.post("/v1/completions", json=body))
        assert await asyncio.to_thread(engine.tokenize_entered.wait, 10.0)
        # The prompt is held in the tokenizer; the loop still serves another request.
        other = await asyncio.wait_for(client.get("/v1/models"), 5)
        assert other.status_code == 200 and not call.done()
        engine.tokenize_gate.set()
        r = await call
        assert r.status_code == 200 and engine.num_tokenized == 1


async def test_cheap_checks_come_before_tokenization() -> None:
    engine = FakeEngine()
    async with fake_client(engine, max_concurrent=1, max_queue=0) as (client, app, _):
        engine.info.max_token_bytes = 4
        r = await client.post("/v1/completions", json={"model": "fake-model", "prompt": "x" * 4000})
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
        assert engine.num_tokenized == 0  # refused by its size alone
        app.state.gateway.serving.start_draining()
        r = await client.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 503 and engine.num_tokenized == 0


async def test_inputs_that_gave_500_now_get_their_status() -> None:
    engine = FakeEngine()
    async with fake_client(engine, api_keys="k1") as (client, _, _):
        r = await client.get("/v1/models", headers={"Authorization": "Bearer k\xe9".encode()})
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        auth = {"Authorization": "Bearer k1", "content-type": "application/json"}
        raw = b'{"model": "fake-model", "prompt": "a\\ud800b", "max_tokens": 2}'
        r = await client.post("/v1/completions", content=raw, headers=auth)
        assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
        raw = b'{"model": "fake-model", "messages": [{"role": "user", "content": "\\udc00"}]}'
        r = await client.post("/v1/chat/completions", content=raw, headers=auth)
        assert r.status_code == 400


async def test_failed_or_slow_engine_core_call_is_503() -> None:
    engine = FakeEngine()
    async with fake_client(engine, admin_call_timeout_s=0.2) as (client, _, _):
        engine.dlfp_failure = RuntimeError("dlfp_get_state failed: boom")
        r = await client.get("/admin/dlfp")
        assert r.status_code == 503 and set(r.json()["error"]) >= {"message", "code"}
        engine.dlfp_failure = None
        engine.dlfp_gate = asyncio.Event()  # never opened: only the call's time-out ends it
        r = await asyncio.wait_for(client.patch("/admin/dlfp", json={"gain": 0.3}), 5)
        assert r.status_code == 503
        engine.dlfp_gate.set()
        engine.dlfp_gate = None
        r = await client.patch("/admin/dlfp", json={"gain": 0.4})  # the lock was released
        assert r.status_code == 200


async def test_negative_priority_needs_a_priority_key() -> None:
    async with fake_client(api_keys="k1,boss", priority_api_keys="boss") as (client, _, _):
        user = {"Authorization": "Bearer k1"}
        boss = {"Authorization": "Bearer boss"}
        r = await client.post(
            "/v1/chat/completions", json=CHAT, headers=user | {"X-Priority": "-3"}
        )
        assert r.status_code == 403
        r = await client.post("/v1/chat/completions", json=CHAT | {"priority": -1}, headers=user)
        assert r.status_code == 403
        r = await client.post("/v1/chat/completions", json=CHAT | {"priority": 5}, headers=user)
        assert r.status_code == 200
        r = await client.post(
            "/v1/chat/completions", json=CHAT, headers=boss | {"X-Priority": "-3"}
        )
        assert r.status_code == 200
    async with fake_client() as (client, _, _):
        r = await client.post("/v1/chat/completions", json=CHAT | {"priority": -1})
        assert r.status_code == 403  # no key is allowed when none is listed


async def test_a_hung_engine_is_noticed() -> None:
    engine = FakeEngine(delay_s=30.0)
    async with fake_client(engine, engine_stall_s=1) as (client, app, _):
        stream = asyncio.create_task(
            client.post("/v1/chat/completions", json=CHAT | {"stream": True})
        )
        deadline = time.monotonic() + 5
        while app.state.gateway.serving.engine_error is None and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert "hung" in (app.state.gateway.serving.engine_error or "")
        assert (await client.get("/ready")).status_code == 503
        r = await client.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 503 and r.json()["error"]["code"] == "engine_unavailable"
        app.state.gateway.serving.cut_streams()
        data = sse_data((await asyncio.wait_for(stream, 5)).text)
        assert data[-1] == "[DONE]" and "error" in json.loads(data[-2])


async def test_an_engine_refusal_is_counted_once_and_frees_the_slot() -> None:
    async with fake_client() as (client, app, _):
        r = await client.post("/v1/completions", json={"model": "fake-model", "prompt": [5000]})
        assert r.status_code == 400
        metrics = (await client.get("/metrics")).text
        assert 'dlfp_requests_total{endpoint="completions",outcome="client_error"} 1.0' in metrics
        assert app.state.gateway.admission.num_active == 0
