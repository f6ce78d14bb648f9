"""The OpenAI-compatible HTTP layer on the FAKE engine (quick tier)."""

from __future__ import annotations

import httpx
import openai

from tests.fakes import FakeEngine
from tests.http_helpers import fake_client, sse_data, sse_json

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


async def test_models_and_health() -> None:
    async with fake_client() as (client, _, _):
        models = (await client.get("/v1/models")).json()
        assert [m["id"] for m in models["data"]] == ["fake-model"]
        assert (await client.get("/health")).json() == {"status": "ok"}
        assert (await client.get("/ready")).status_code == 200


async def test_ready_is_503_until_engine_serves() -> None:
    async with fake_client(FakeEngine(ready=False)) as (client, _app, engine):
        engine._ready = False
        assert (await client.get("/ready")).status_code == 503
        r = await client.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 503
        assert r.json()["error"]["code"] == "engine_unavailable"


async def test_chat_non_streaming_has_usage() -> None:
    async with fake_client() as (client, _, _):
        r = await client.post("/v1/chat/completions", json=CHAT)
        body = r.json()
        assert r.status_code == 200
        assert body["object"] == "chat.completion"
        assert body["choices"][0]["message"]["content"] == "fake token stream from the"
        assert body["choices"][0]["finish_reason"] == "length"
        assert body["usage"]["completion_tokens"] == 5


async def test_chat_streaming_sse_shape_and_usage() -> None:
    async with fake_client() as (client, _, _):
        r = await client.post(
            "/v1/chat/completions",
            json=CHAT | {"stream": True, "stream_options": {"include_usage": True}},
        )
        assert r.headers["content-type"].startswith("text/event-stream")
        data = sse_data(r.text)
        assert data[-1] == "[DONE]"
        chunks = sse_json(r.text)
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        content = [c["choices"][0]["delta"]["content"] for c in chunks[1:-1]]
        assert len(content) == 5  # one event per generated-token delta
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 5


async def test_completions_stream_and_n() -> None:
    async with fake_client() as (client, _, _):
        body = {"model": "fake-model", "prompt": "hello", "max_tokens": 3, "n": 2}
        r = await client.post("/v1/completions", json=body)
        assert [c["text"] for c in r.json()["choices"]] == ["fake token stream"] * 2
        r = await client.post("/v1/completions", json=body | {"stream": True})
        indexes = {c["choices"][0]["index"] for c in sse_json(r.text)}
        assert indexes == {0, 1}


async def test_errors_use_openai_body_and_status() -> None:
    async with fake_client(max_body_bytes=2048) as (client, _, _):
        cases = [
            (
                client.post(
                    "/v1/chat/completions",
                    content=b"{not json",
                    headers={"content-type": "application/json"},
                ),
                400,
            ),
            (client.post("/v1/chat/completions", json={"model": "fake-model"}), 400),
            (client.post("/v1/chat/completions", json=CHAT | {"model": "nope"}), 404),
            (client.post("/v1/chat/completions", json=CHAT | {"temperature": "hot"}), 400),
            (client.post("/v1/chat/completions", json=CHAT | {"max_tokens": 10**9}), 400),
            (client.post("/v1/chat/completions", json=CHAT | {"n": 1000}), 400),
            (
                client.post(
                    "/v1/chat/completions",
                    json=CHAT | {"messages": [{"role": "user", "content": "x" * 300}]},
                ),
                400,
            ),
            (
                client.post(
                    "/v1/chat/completions",
                    json=CHAT | {"messages": [{"role": "user", "content": "x" * 4000}]},
                ),
                413,
            ),
            (
                client.post(
                    "/v1/chat/completions",
                    content=b'{"model": "\xff\xfe"}',
                    headers={"content-type": "application/json"},
                ),
                400,
            ),
            (client.post("/v1/completions", json={"model": "fake-model", "prompt": [5000]}), 400),
        ]
        for call, status in cases:
            r = await call
            assert r.status_code == status, (status, r.text)
            error = r.json()["error"]
            assert set(error) == {"message", "type", "param", "code"} and error["message"]


async def test_context_overflow_message_says_so() -> None:
    async with fake_client() as (client, _, _):
        r = await client.post(
            "/v1/chat/completions",
            json=CHAT | {"messages": [{"role": "user", "content": "x" * 300}]},
        )
        assert "context" in r.json()["error"]["message"]
        assert r.json()["error"]["code"] == "context_length_exceeded"
        assert r.json()["error"]["param"] == "messages"
        for path, body, param in (
            ("/v1/completions", {"model": "fake-model", "prompt": "x " * 150}, "prompt"),
            ("/v1/responses", {"model": "fake-model", "input": "x " * 150}, "input"),
        ):
            r = await client.post(path, json=body)
            assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


async def test_request_id_echoed_or_made() -> None:
    async with fake_client() as (client, _, _):
        r = await client.post(
            "/v1/chat/completions", json=CHAT, headers={"X-Request-Id": "abc-123"}
        )
        assert r.headers["x-request-id"] == "abc-123"
        assert r.json()["id"].startswith("chatcmpl-") and "abc-123" not in r.json()["id"]
        r = await client.get("/v1/models")
        assert len(r.headers["x-request-id"]) == 32


async def test_api_keys_protect_v1() -> None:
    async with fake_client(api_keys="k1,k2") as (client, _, _):
        assert (await client.get("/v1/models")).status_code == 401
        assert (
            await client.get("/v1/models", headers={"Authorization": "Bearer k3"})
        ).status_code == 401
        assert (
            await client.get("/v1/models", headers={"Authorization": "Bearer k2"})
        ).status_code == 200
        assert (await client.get("/health")).status_code == 200


async def test_engine_death_mid_stream_ends_with_error_event() -> None:
    engine = FakeEngine()
    engine.fail_after_tokens = 2
    async with fake_client(engine) as (client, _, _):
        r = await client.post("/v1/chat/completions", json=CHAT | {"stream": True})
        assert r.status_code == 200
        events = sse_json(r.text)
        assert "error" in events[-1] and events[-1]["error"]["code"] == "engine_error"
        assert sse_data(r.text)[-1] == "[DONE]"


async def test_openai_client_unchanged() -> None:
    async with fake_client() as (_client, app, _):
        transport = httpx.ASGITransport(app=app)
        http = httpx.AsyncClient(transport=transport, base_url="http://testserver/v1")
        oai = openai.AsyncOpenAI(
            api_key="unused", base_url="http://testserver/v1", http_client=http
        )
        reply = await oai.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}], max_tokens=3
        )
        assert reply.choices[0].message.content == "fake token stream"
        stream = await oai.chat.completions.create(
            model="fake-model",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=3,
            stream=True,
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        assert text == "fake token stream"
        try:
            await oai.chat.completions.create(
                model="other", messages=[{"role": "user", "content": "hi"}]
            )
        except openai.NotFoundError as exc:
            assert exc.status_code == 404
        else:
            raise AssertionError("expected NotFoundError")


async def test_return_token_ids_in_stream() -> None:
    async with fake_client() as (client, _, _):
        body = CHAT | {"stream": True, "return_token_ids": True}
        r = await client.post("/v1/chat/completions", json=body)
        ids = [c["choices"][0]["token_ids"] for c in sse_json(r.text)[1:]]
        assert ids == [[0], [1], [2], [3], [4]]


async def test_dead_engine_is_503_at_once() -> None:
    async with fake_client() as (client, _, engine):
        engine.kill()
        ready = await client.get("/ready")
        assert ready.status_code == 503 and "engine failed" in ready.json()["reason"]
        r = await client.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 503 and r.json()["error"]["code"] == "engine_unavailable"
