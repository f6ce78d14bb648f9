"""The gateway under abuse, on the FAKE engine: bad text anywhere in a body is refused
before anything reaches the engine, with its JSON path named."""

from __future__ import annotations

import asyncio
import json

import pytest

from gateway.errors import APIError
from gateway.protocol import check_text
from tests.fakes import FakeEngine
from tests.http_helpers import fake_client

JSON = {"content-type": "application/json"}
CHAT = [{"role": "user", "content": "hi"}]
RESPONSES = {"model": "fake-model", "input": "hi"}
LONE = "\ud800"


def _raw(body: dict[str, object]) -> bytes:
    # json.dumps escapes the lone surrogate as \ud800, as a client's JSON would carry it.
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (
            "/v1/chat/completions",
            {
                "model": "fake-model",
                "messages": [{"role": "user", "content": "hi"}],
                "stop": [LONE],
            },
            "stop.0",
        ),
        (
            "/v1/completions",
            {"model": "fake-model", "prompt": "hi", "stop": "a" + LONE},
            "stop",
        ),
        (
            "/v1/chat/completions",
            {
                "model": "fake-model",
                "messages": CHAT,
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": "f",
                            "parameters": {"type": "object", "properties": {LONE: {}}},
                        },
                    }
                ],
            },
            "tools.0.function.parameters.properties.<key>",
        ),
        (
            "/v1/responses",
            {"model": "fake-model", "input": "hi", "tools": [{"type": LONE}]},
            "tools.0.type",
        ),
        (
            "/v1/responses",
            {"model": "fake-model", "input": "hi", "instructions": LONE},
            "instructions",
        ),
    ],
)
async def test_a_lone_surrogate_anywhere_is_400_naming_its_path(
    path: str, body: dict[str, object], param: str
) -> None:
    async with fake_client() as (client, _, engine):
        r = await client.post(path, content=_raw(body), headers=JSON)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["param"] == param and "surrogate" in error["message"]
        assert engine.submitted == []
        # The connection still serves: the next request on it is answered.
        ok = await client.post(
            "/v1/completions", json={"model": "fake-model", "prompt": "hi", "max_tokens": 2}
        )
        assert ok.status_code == 200


def test_the_text_check_walks_any_depth_without_recursion() -> None:
    deep: object = LONE
    for _ in range(10_000):
        deep = {"a": [deep]}
    with pytest.raises(APIError) as refused:
        check_text(deep)
    assert refused.value.param is not None and refused.value.param.startswith("a.0.a.0")
    check_text({"a": ["é", {"ü": "日本"}], "n": 1})  # valid text passes


async def test_a_burst_is_refused_before_tokenizing_beyond_the_queues_room() -> None:
    """Reserved requests count against the queue: of 12 at once, at most
    ``max_concurrent + max_queue`` (2 + 1) are tokenized, the rest refused at once."""
    engine = FakeEngine(tokenize_delay_s=0.2)
    async with fake_client(engine, max_concurrent=2, max_queue=1, max_queue_wait_s=30) as (
        client,
        _,
        _,
    ):
        body = {"model": "fake-model", "prompt": "hello there", "max_tokens": 2}
        replies = await asyncio.gather(
            *(client.post("/v1/completions", json=body) for _ in range(12))
        )
    statuses = sorted(r.status_code for r in replies)
    assert statuses == [200] * 3 + [429] * 9, statuses
    assert {r.json()["error"]["code"] for r in replies if r.status_code == 429} == {"queue_full"}
    assert engine.num_tokenized == 3


async def test_a_non_streamed_reply_too_big_to_build_on_the_loop_is_400() -> None:
    engine = FakeEngine(max_model_len=100_000)
    async with fake_client(engine, max_tokens_limit=8192, max_reply_tokens=100_000) as (
        client,
        _,
        _,
    ):
        body = {"model": "fake-model", "prompt": "hi", "max_tokens": 8000, "n": 8, "logprobs": 1}
        r = await client.post("/v1/completions", json=body)
        assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens", r.text
        assert engine.submitted == []
        fits = await client.post(
            "/v1/completions", json=body | {"max_tokens": 6000, "n": 8, "logprobs": 1}
        )
        assert fits.status_code == 200  # 8 x 6000 x 2 = 96,000


def _nested(depth: int) -> dict[str, object]:
    schema: dict[str, object] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": {"oneOf": [schema, {"type": "null"}]}}}
    return schema


def _tool(name: str, parameters: dict[str, object]) -> dict[str, object]:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


async def test_structured_outputs_are_bounded_by_the_settings() -> None:
    engine = FakeEngine()
    async with fake_client(engine, max_tools=2, max_schema_depth=20, max_schema_bytes=2048) as (
        client,
        _,
        _,
    ):
        flat = {"type": "object", "properties": {"city": {"type": "string"}}}
        cases = [
            ({"tools": [_tool(f"t{i}", flat) for i in range(3)]}, "tools"),
            ({"tools": [_tool("deep", _nested(10))]}, "tools.0.function.parameters"),
            (
                {"tools": [_tool("big", {"type": "object", "description": "x" * 3000})]},
                "tools.0.function.parameters",
            ),
            (
                {
                    "response_format": {
                        "type": "json_schema",
                        "json_schema": {"name": "s", "schema": _nested(10)},
                    }
                },
                "response_format.json_schema.schema",
            ),
        ]
        for extra, param in cases:
            body = {"model": "fake-model", "messages": CHAT, "max_tokens": 2} | extra
            r = await client.post("/v1/chat/completions", json=body)
            assert r.status_code == 400 and r.json()["error"]["param"] == param, (param, r.text)
        ok = {"model": "fake-model", "messages": CHAT, "max_tokens": 2, "tools": [_tool("a", flat)]}
        assert (await client.post("/v1/chat/completions", json=ok)).status_code == 200
    assert len(engine.submitted) == 1  # only the request within the bounds
