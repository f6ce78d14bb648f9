"""No request field is silently ignored; sampling defaults; tool replies (FAKE engine)."""

from __future__ import annotations

from typing import Any

import pytest

from engine_worker.api import ChatOutput, ParsedOutput, ToolCallDelta
from gateway.protocol import IGNORED_FIELDS
from tests.fakes import FakeEngine
from tests.http_helpers import fake_client, sse_json

CHAT: dict[str, Any] = {
    "model": "fake-model",
    "messages": [{"role": "user", "content": "hi"}],
    "max_tokens": 5,
}
TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
}


async def _error(body: dict[str, Any], path: str = "/v1/chat/completions") -> dict[str, Any]:
    async with fake_client() as (client, _, _):
        r = await client.post(path, json=body)
        assert r.status_code == 400, r.text
        error: dict[str, Any] = r.json()["error"]
        return error


async def test_unknown_field_is_400_naming_it() -> None:
    error = await _error(CHAT | {"frobnicate": 1})
    assert error["param"] == "frobnicate" and "frobnicate" in error["message"]
    error = await _error({"model": "fake-model", "prompt": "x", "suffix": "y"}, "/v1/completions")
    assert error["param"] == "suffix"
    error = await _error(CHAT | {"messages": [{"role": "user", "content": "x", "colour": 1}]})
    assert error["param"] == "messages.0.colour"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("audio", {"voice": "alloy", "format": "wav"}),
        ("modalities", ["text", "audio"]),
        ("prediction", {"type": "content", "content": "x"}),
        ("web_search_options", {}),
    ],
)
async def test_refused_fields_are_400_naming_them(field: str, value: Any) -> None:
    error = await _error(CHAT | {field: value})
    assert error["param"] == field


async def test_image_and_audio_parts_are_refused() -> None:
    for part in (
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}},
        {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}},
    ):
        content = [{"type": "text", "text": "look"}, part]
        error = await _error(CHAT | {"messages": [{"role": "user", "content": content}]})
        assert error["param"] == "messages.0.content.1"


async def test_ignored_fields_and_nulls_are_accepted() -> None:
    ignored = {"user": "u1", "metadata": {"a": "b"}, "service_tier": "auto", "store": False}
    nulls = {"temperature": None, "top_p": None, "n": None, "stop": None, "seed": None}
    assert {"user", "metadata", "service_tier", "store"} <= IGNORED_FIELDS
    async with fake_client() as (client, _, engine):
        r = await client.post(
            "/v1/chat/completions", json=CHAT | ignored | nulls | {"modalities": ["text"]}
        )
        assert r.status_code == 200, r.text
        options = engine.submitted[-1][2]
        assert options.temperature == 1.0 and options.top_p == 1.0 and options.n == 1


async def test_unset_sampling_fields_take_the_models_defaults() -> None:
    engine = FakeEngine()
    engine.info.sampling_defaults = {"temperature": 0.2, "top_p": 0.9, "top_k": 40}
    async with fake_client(engine) as (client, _, _):
        await client.post("/v1/chat/completions", json=CHAT | {"temperature": None})
        options = engine.submitted[-1][2]
        assert (options.temperature, options.top_p, options.top_k) == (0.2, 0.9, 40)
        await client.post("/v1/completions", json={"model": "fake-model", "prompt": "x"})
        assert engine.submitted[-1][2].temperature == 0.2
        # An explicit value always wins, zero included.
        await client.post("/v1/chat/completions", json=CHAT | {"temperature": 0, "top_p": 1})
        options = engine.submitted[-1][2]
        assert (options.temperature, options.top_p) == (0.0, 1.0)


async def test_logit_bias_is_honoured() -> None:
    async with fake_client() as (client, _, engine):
        r = await client.post("/v1/chat/completions", json=CHAT | {"logit_bias": {"7": -100}})
        assert r.status_code == 200
        assert engine.submitted[-1][2].logit_bias == {7: -100.0}
    error = await _error(CHAT | {"logit_bias": {"seven": 1}})
    assert error["param"] == "logit_bias"


async def test_model_card_has_vllms_fields() -> None:
    async with fake_client() as (client, _, _):
        [card] = (await client.get("/v1/models")).json()["data"]
        assert card["root"] == "fake-model" and card["parent"] is None
        assert card["max_model_len"] == 256
        assert card["permission"][0]["object"] == "model_permission"


async def test_tool_choice_must_name_a_given_tool() -> None:
    named = {"type": "function", "function": {"name": "other"}}
    error = await _error(CHAT | {"tools": [TOOL], "tool_choice": named})
    assert error["param"] == "tool_choice"
    error = await _error(CHAT | {"tool_choice": "required"})
    assert error["param"] == "tool_choice"


class _CannedParser:
    """Reads every output as one call to get_weather, streamed in two pieces."""

    def __init__(self) -> None:
        self.num_deltas = 0

    def parse(self, text: str, token_ids: list[int]) -> ParsedOutput:
        call = ToolCallDelta(0, "call-1", "get_weather", '{"city": "Paris"}')
        return ParsedOutput(content=None, tool_calls=[call])

    def parse_delta(self, text: str, token_ids: list[int], finished: bool) -> ParsedOutput | None:
        self.num_deltas += 1
        if self.num_deltas == 1:
            return ParsedOutput(tool_calls=[ToolCallDelta(0, "call-1", "get_weather", "")])
        if finished:
            return ParsedOutput(tool_calls=[ToolCallDelta(0, arguments='{"city": "Paris"}')])
        return None


async def test_tool_calls_in_reply_and_stream() -> None:
    engine = FakeEngine()
    engine.info.sampling_defaults = {}
    engine.output = ChatOutput(new_parser=_CannedParser)
    history = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c0", "content": "sunny"},
    ]
    body = CHAT | {"messages": history, "tools": [TOOL]}
    async with fake_client(engine) as (client, _, _):
        r = await client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        assert choice["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
        assert choice["finish_reason"] == "length"  # the fake engine stops on length
        assert engine.rendered_tools == [TOOL]
        assert engine.output_requests[-1]["tool_choice"] == "auto"
        assert engine.output_requests[-1]["messages"][1]["tool_calls"][0]["id"] == "c0"
        r = await client.post("/v1/chat/completions", json=body | {"stream": True})
        deltas = [c["choices"][0]["delta"] for c in sse_json(r.text) if c["choices"]]
        calls = [tc for d in deltas for tc in d.get("tool_calls", [])]
        assert calls[0] == {
            "index": 0,
            "id": "call-1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": ""},
        }
        assert "".join(tc["function"].get("arguments", "") for tc in calls) == '{"city": "Paris"}'
