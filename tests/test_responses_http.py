"""``POST /v1/responses`` on the FAKE engine, through the official client (quick tier)."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from engine_worker.contract.api import ChatOutput
from tests.fakes import FakeEngine
from tests.http_helpers import fake_client, sse_json
from tests.test_openai_fields import _CannedParser

TOOL: Any = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def _client(app: Any) -> openai.AsyncOpenAI:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t/v1")
    return openai.AsyncOpenAI(api_key="unused", base_url="http://t/v1", http_client=http)


async def test_text_reply_and_stream() -> None:
    async with fake_client() as (_client_unused, app, engine):
        oai = _client(app)
        reply = await oai.responses.create(
            model="fake-model", input="hi", instructions="Be brief.", max_output_tokens=3
        )
        assert reply.output_text == "fake token stream"
        assert reply.status == "incomplete"  # the fake engine stops on length
        assert reply.usage is not None and reply.usage.output_tokens == 3
        assert engine.output_requests[-1]["messages"][0] == {
            "role": "system",
            "content": "Be brief.",
        }
        stream = await oai.responses.create(
            model="fake-model", input="hi", max_output_tokens=3, stream=True
        )
        events = [e async for e in stream]
        kinds = [e.type for e in events]
        assert kinds[:4] == [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
        ]
        assert kinds[4:7] == ["response.output_text.delta"] * 3
        assert kinds[7:] == [
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.incomplete",
        ]
        assert [e.sequence_number for e in events] == list(range(len(events)))
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert text == "fake token stream"


async def test_function_call_reply_and_stream() -> None:
    engine = FakeEngine()
    engine.output = ChatOutput(new_parser=_CannedParser)
    history: Any = [
        {"role": "user", "content": "Weather?"},
        {"type": "function_call", "call_id": "c0", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c0", "output": "sunny"},
    ]
    async with fake_client(engine) as (client, app, _):
        oai = _client(app)
        reply = await oai.responses.create(
            model="fake-model", input=history, tools=[TOOL], max_output_tokens=3
        )
        [call] = [item for item in reply.output if item.type == "function_call"]
        assert call.name == "get_weather" and call.arguments == '{"city": "Paris"}'
        messages = engine.output_requests[-1]["messages"]
        assert messages[1]["tool_calls"][0]["id"] == "c0"
        assert messages[2] == {"role": "tool", "content": "sunny", "tool_call_id": "c0"}
        r = await client.post(
            "/v1/responses",
            json={"model": "fake-model", "input": "x", "tools": [TOOL], "stream": True},
        )
        events = sse_json(r.text)
        kinds = [e["type"] for e in events]
        assert "response.function_call_arguments.delta" in kinds
        done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
        assert done["arguments"] == '{"city": "Paris"}' and done["name"] == "get_weather"


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),  # not stored
        ({"background": True}, "background"),
        ({"tools": [{"type": "web_search"}]}, "tools.0"),
        ({"no_such_field": 1}, "no_such_field"),
    ],
)
async def test_unsupported_is_400_naming_it(extra: dict[str, Any], param: str) -> None:
    async with fake_client() as (client, _, _):
        r = await client.post("/v1/responses", json={"model": "fake-model", "input": "x"} | extra)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == param


async def test_store_and_metadata_are_accepted() -> None:
    async with fake_client() as (client, _, _):
        body = {"model": "fake-model", "input": "x", "store": True, "metadata": {"a": "b"}}
        r = await client.post("/v1/responses", json=body | {"max_output_tokens": 2})
        assert r.status_code == 200 and r.json()["object"] == "response"
        metrics = (await client.get("/metrics")).text
        assert 'endpoint="responses"' in metrics
