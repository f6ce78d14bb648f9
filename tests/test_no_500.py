"""Inputs and model outputs that once reached a 500, on the FAKE engine (quick tier)."""

from __future__ import annotations

import json

from engine_worker.client.output_parser import _compact
from engine_worker.contract.api import ChatOutput, ParsedOutput, ToolCallDelta
from gateway.errors import APIError
from tests.fakes import FakeEngine
from tests.http_helpers import fake_client, sse_json

TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "Weather?"}]}


def test_an_error_message_that_quotes_a_lone_surrogate_still_renders() -> None:
    error = APIError(400, "unsupported tool type '\ud800'", param="tools.0.\ud800")
    body = json.loads(error.response().body)  # rendering it raised UnicodeEncodeError
    assert body["error"]["message"] == "unsupported tool type '\\ud800'"
    assert body["error"]["param"] == "tools.0.\\ud800"


async def test_a_lone_surrogate_in_a_responses_tool_type_is_a_400() -> None:
    raw = '{"model": "fake-model", "input": "hi", "tools": [{"type": "\\ud800"}]}'
    async with fake_client() as (client, _, _):
        r = await client.post(
            "/v1/responses", content=raw, headers={"content-type": "application/json"}
        )
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "tools.0.type"
        again = await client.post("/v1/responses", json={"model": "fake-model", "input": "hi"})
        assert again.status_code == 200


class _BadNameParser:
    """A parser result the reply's models refuse: a call with no name."""

    def __init__(self, name: str) -> None:
        self.name = name

    def parse(self, text: str, token_ids: list[int]) -> ParsedOutput:
        return ParsedOutput(tool_calls=[ToolCallDelta(0, "call-1", self.name, "{}")])

    def parse_delta(self, text: str, token_ids: list[int], finished: bool) -> ParsedOutput | None:
        return ParsedOutput(content=text)


async def test_a_tool_call_the_reply_model_refuses_comes_back_as_content() -> None:
    for name in ("", "f" * 300):
        engine = FakeEngine()
        engine.output = ChatOutput(new_parser=lambda name=name: _BadNameParser(name))
        async with fake_client(engine) as (client, _, _):
            r = await client.post("/v1/chat/completions", json=CHAT | {"tools": [TOOL]})
            assert r.status_code == 200, r.text
            choice = r.json()["choices"][0]
            assert choice["message"]["tool_calls"] in (None, [])
            assert choice["message"]["content"]  # the model's text, as it is
            assert choice["finish_reason"] in ("stop", "length")
            flat = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
            r = await client.post(
                "/v1/responses", json={"model": "fake-model", "input": "hi", "tools": [flat]}
            )
            assert r.status_code == 200, r.text
            kinds = [item["type"] for item in r.json()["output"]]
            assert "function_call" not in kinds and "message" in kinds


def test_compacting_a_structural_tag_does_not_recurse() -> None:
    tag: dict[str, object] = {"max_whitespace_cnt": None}
    for _ in range(400):  # 800 levels, two frames each: over the interpreter's 1,000
        tag = {"a": [tag]}
    out = json.loads(_compact(json.dumps(tag)))
    for _ in range(400):
        out = out["a"][0]
    assert out == {"max_whitespace_cnt": 1}


async def test_a_long_string_input_to_responses_is_no_item_count() -> None:
    async with fake_client(FakeEngine(max_model_len=100_000)) as (client, _, _):
        r = await client.post("/v1/responses", json={"model": "fake-model", "input": "x" * 3000})
        assert r.status_code == 200, r.text  # was "Value should have at most 1024 items"
        items = [{"type": "message", "role": "user", "content": "hi"}] * 1025
        r = await client.post("/v1/responses", json={"model": "fake-model", "input": items})
        assert r.status_code == 400 and r.json()["error"]["param"] == "input"


async def test_a_responses_stream_ends_an_engine_failure_with_a_responses_error_event() -> None:
    engine = FakeEngine()
    engine.fail_after_tokens = 2
    body = {"model": "fake-model", "input": "hi", "stream": True, "max_output_tokens": 8}
    async with fake_client(engine) as (client, _, _):
        r = await client.post("/v1/responses", json=body)
        events = sse_json(r.text)
    kinds = [e.get("type") for e in events]
    assert "error" in kinds and kinds[-1] == "response.failed", kinds
    error = events[kinds.index("error")]
    assert error["code"] == "engine_error" and error["message"]
    assert events[-1]["response"]["status"] == "failed"
    assert all("type" in e for e in events)  # no chat-style {"error": ...} body
    numbers = [e["sequence_number"] for e in events]
    assert numbers == list(range(len(events)))
