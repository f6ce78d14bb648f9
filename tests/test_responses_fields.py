"""``/v1/responses`` takes every field its clients send: honoured, accepted at its no-op
value, or refused by value (quick tier, FAKE engine)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fakes import FakeEngine
from tests.http_helpers import fake_client, sse_json

BODY: Any = {"model": "fake-model", "input": "hi", "max_output_tokens": 3}
ADD: Any = {
    "type": "function",
    "name": "add",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
}


@pytest.mark.parametrize(
    "extra",
    [
        {"include": []},
        {"include": ["reasoning.encrypted_content"]},
        {"truncation": "disabled"},
        {"reasoning": {}},
        {"reasoning": {"effort": None, "summary": None}},
        {"text": {"verbosity": "medium"}},
        {"stream_options": {"include_obfuscation": False}},
        {"prompt_cache_retention": "24h", "client_metadata": {"x": "y"}},
        {"context_management": []},
        {"store": False, "service_tier": "auto", "prompt_cache_key": "k"},
    ],
)
async def test_what_agent_frameworks_send_is_accepted(extra: dict[str, Any]) -> None:
    async with fake_client() as (client, _, _):
        r = await client.post("/v1/responses", json=BODY | extra)
        assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"include": ["file_search_call.results"]}, "include"),
        ({"truncation": "auto"}, "truncation"),
        ({"reasoning": {"effort": "high"}}, "reasoning"),
        ({"text": {"verbosity": "low"}}, "text.verbosity"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"top_logprobs": 21}, "top_logprobs"),
        ({"max_tool_calls": -1}, "max_tool_calls"),
    ],
)
async def test_a_value_with_an_effect_not_served_is_400_naming_it(
    extra: dict[str, Any], param: str
) -> None:
    async with fake_client() as (client, _, _):
        r = await client.post("/v1/responses", json=BODY | extra)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == param


async def test_sampling_fields_reach_the_engine() -> None:
    sampling = {
        "stop": ["x"],
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "logit_bias": {"7": -100},
        "top_k": 5,
        "min_p": 0.1,
        "repetition_penalty": 1.2,
        "ignore_eos": True,
    }
    async with fake_client() as (client, _, engine):
        r = await client.post("/v1/responses", json=BODY | sampling)
        assert r.status_code == 200, r.text
        options = engine.submitted[-1][2]
        assert options.stop == ("x",) and options.logit_bias == {7: -100.0}
        assert (options.presence_penalty, options.frequency_penalty) == (0.5, -0.5)
        assert (options.top_k, options.min_p, options.repetition_penalty) == (5, 0.1, 1.2)
        assert options.ignore_eos


async def test_output_text_logprobs_when_included() -> None:
    include = {"include": ["message.output_text.logprobs"], "top_logprobs": 2}
    async with fake_client() as (client, _, engine):
        reply = (await client.post("/v1/responses", json=BODY | include)).json()
        assert engine.submitted[-1][2].logprobs == 2
        [part] = reply["output"][0]["content"]
        assert [lp["token"] for lp in part["logprobs"]] == ["fake", " token", " stream"]
        assert set(part["logprobs"][0]) == {"token", "logprob", "bytes", "top_logprobs"}
        assert reply["top_logprobs"] == 2

        r = await client.post("/v1/responses", json=BODY | include | {"stream": True})
        events = sse_json(r.text)
        deltas = [e for e in events if e["type"] == "response.output_text.delta"]
        assert [d["logprobs"][0]["token"] for d in deltas] == ["fake", " token", " stream"]
        done = next(e for e in events if e["type"] == "response.content_part.done")
        assert len(done["part"]["logprobs"]) == 3

        plain = (await client.post("/v1/responses", json=BODY)).json()
        assert engine.submitted[-1][2].logprobs is None
        assert plain["output"][0]["content"][0]["logprobs"] == []


async def test_max_tool_calls_zero_turns_tools_off() -> None:
    body = BODY | {"tools": [ADD], "max_tool_calls": 0}
    async with fake_client(FakeEngine(max_model_len=4096)) as (client, _, engine):
        r = await client.post("/v1/responses", json=body)
        assert r.status_code == 200, r.text
        assert engine.output_requests[-1]["tool_choice"] == "none"
        assert r.json()["max_tool_calls"] == 0


async def test_the_response_echoes_the_no_op_settings() -> None:
    async with fake_client() as (client, _, _):
        reply = (await client.post("/v1/responses", json=BODY)).json()
        assert reply["truncation"] == "disabled"
        assert reply["reasoning"] == {"effort": None, "summary": None}
        assert reply["top_logprobs"] == 0 and reply["max_tool_calls"] is None


async def test_a_chat_history_from_reasoning_clients_is_accepted() -> None:
    """DeepSeek-style histories carry ``reasoning_content``; streamed calls keep ``index``."""
    history: Any = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "The user wants the weather.",
            "tool_calls": [
                {
                    "index": 0,
                    "id": "c0",
                    "type": "function",
                    "function": {"name": "add", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c0", "content": "sunny"},
    ]
    body = {"model": "fake-model", "messages": history, "max_tokens": 2}
    async with fake_client() as (client, _, engine):
        r = await client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        [call] = engine.output_requests[-1]["messages"][1]["tool_calls"]
        assert "index" not in call
        assert "reasoning_content" not in engine.output_requests[-1]["messages"][1]
