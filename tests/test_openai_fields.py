"""No request field is silently ignored; sampling defaults; tool replies (FAKE engine)."""

from __future__ import annotations

from typing import Any

import pytest

from engine_worker.contract.api import ChatOutput, ParsedOutput, ToolCallDelta
from gateway.protocol import IGNORED_FIELDS, EngineFields
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


OUTPUT_FIELDS: dict[str, Any] = {
    "min_tokens": 2,
    "stop_token_ids": [7, 9],
    "include_stop_str_in_output": True,
    "skip_special_tokens": False,
    "spaces_between_special_tokens": False,
    "bad_words": ["fake"],
    "allowed_token_ids": [1, 2, 3],
    "watermarking": False,
}
EXPECTED_OPTIONS = OUTPUT_FIELDS | {
    "stop_token_ids": (7, 9),
    "bad_words": ("fake",),
    "allowed_token_ids": (1, 2, 3),
}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", CHAT),
        ("/v1/completions", {"model": "fake-model", "prompt": "hi", "max_tokens": 5}),
        ("/v1/responses", {"model": "fake-model", "input": "hi", "max_output_tokens": 5}),
    ],
)
async def test_vllm_output_fields_reach_the_engine(path: str, body: dict[str, Any]) -> None:
    fields = OUTPUT_FIELDS
    if path == "/v1/responses":  # the fields vLLM's Responses model has too
        fields = {
            name: OUTPUT_FIELDS[name] for name in OUTPUT_FIELDS if name in EngineFields.model_fields
        }
    async with fake_client() as (client, _, engine):
        r = await client.post(path, json=body | fields)
        assert r.status_code == 200, r.text
        options = engine.submitted[-1][2]
        assert {name: getattr(options, name) for name in fields} == {
            name: EXPECTED_OPTIONS[name] for name in fields
        }
        await client.post(path, json=body)
        options = engine.submitted[-1][2]
        assert (options.min_tokens, options.stop_token_ids, options.bad_words) == (0, (), ())
        assert options.skip_special_tokens and options.allowed_token_ids is None


async def test_stop_token_ids_end_the_reply_after_min_tokens() -> None:
    async with fake_client() as (client, _, _):
        r = await client.post("/v1/chat/completions", json=CHAT | {"stop_token_ids": [2]})
        [choice] = r.json()["choices"]
        assert choice["finish_reason"] == "stop"
        assert choice["message"]["content"] == "fake token stream"
        body = CHAT | {"stop_token_ids": [2], "min_tokens": 3}
        [choice] = (await client.post("/v1/chat/completions", json=body)).json()["choices"]
        assert choice["finish_reason"] == "length"


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"min_tokens": 6}, "min_tokens"),  # over max_tokens=5
        ({"min_tokens": -1}, "min_tokens"),
        ({"stop_token_ids": [-1]}, "stop_token_ids.0"),
        ({"stop_token_ids": list(range(65))}, "stop_token_ids"),
        ({"stop_token_ids": [5000]}, "stop_token_ids"),  # past the vocabulary
        ({"allowed_token_ids": []}, "allowed_token_ids"),
        ({"allowed_token_ids": [1, 5000]}, "allowed_token_ids"),
        ({"bad_words": [""]}, "bad_words.0"),
        ({"bad_words": ["x"] * 129}, "bad_words"),
        ({"skip_special_tokens": "no"}, "skip_special_tokens"),
    ],
)
async def test_bad_output_fields_are_400_naming_them(extra: dict[str, Any], param: str) -> None:
    error = await _error(CHAT | extra)
    assert error["param"] == param


async def test_a_parser_that_reads_special_tokens_keeps_them() -> None:
    engine = FakeEngine()
    engine.output = ChatOutput(constraints={"skip_special_tokens": False})
    async with fake_client(engine) as (client, _, _):
        body = CHAT | {"tools": [TOOL], "skip_special_tokens": True}
        r = await client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        assert engine.submitted[-1][2].skip_special_tokens is False
        # The parser is asked with the client's value, and may only turn it off.
        assert engine.output_requests[-1]["skip_special_tokens"] is True
    engine = FakeEngine()
    async with fake_client(engine) as (client, _, _):
        await client.post("/v1/chat/completions", json=CHAT | {"skip_special_tokens": False})
        assert engine.submitted[-1][2].skip_special_tokens is False
