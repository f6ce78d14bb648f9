"""A tool_choice naming a function: the output is its arguments, and the gateway builds the
call (quick tier, FAKE engine, whose constrained output is a canned schema instance)."""

from __future__ import annotations

import json
from typing import Any

from gateway.named_call import ANY_OBJECT, NamedCallParser, named_call_output
from tests.fakes import FakeEngine
from tests.http_helpers import fake_client, sse_json

ADD: Any = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
BODY: Any = {
    "model": "fake-model",
    "messages": [{"role": "user", "content": "Add 2 and 3."}],
    "tools": [ADD],
    "tool_choice": {"type": "function", "function": {"name": "add"}},
    "max_tokens": 32,
}


def test_the_constraint_is_the_functions_parameters() -> None:
    output = named_call_output("add", ADD["function"]["parameters"])
    assert output.constraints == {"json_schema": ADD["function"]["parameters"]}
    assert named_call_output("f", None).constraints == {"json_schema": ANY_OBJECT}


def test_the_streamed_call_opens_once_then_carries_arguments() -> None:
    parser = NamedCallParser("add")
    assert parser.parse_delta("", [], finished=False) is None
    first = parser.parse_delta('{"a"', [1], finished=False)
    assert first is not None
    [opened] = first.tool_calls
    assert (opened.name, opened.arguments) == ("add", '{"a"')
    assert opened.id is not None and opened.id.startswith("call_")
    second = parser.parse_delta(":1}", [2], finished=True)
    assert second is not None
    assert [(c.id, c.name, c.arguments) for c in second.tool_calls] == [(None, None, ":1}")]
    whole = parser.parse('{"a":1}', [1, 2])
    assert whole.content is None and whole.tool_calls[0].id == opened.id


async def test_a_named_call_reply_and_stream() -> None:
    engine = FakeEngine(max_model_len=4096)
    async with fake_client(engine) as (client, _, _):
        r = await client.post("/v1/chat/completions", json=BODY)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "stop"  # OpenAI's finish for a named choice
        assert choice["message"]["content"] is None
        [call] = choice["message"]["tool_calls"]
        assert call["function"]["name"] == "add"
        assert json.loads(call["function"]["arguments"]) == {"a": 1, "b": 1}
        options = engine.submitted[-1][2]
        assert options.json_schema == ADD["function"]["parameters"]
        assert options.structural_tag is None
        assert engine.output_requests == []  # vLLM's parsers are not asked

        r = await client.post("/v1/chat/completions", json=BODY | {"stream": True})
        chunks = [c["choices"][0] for c in sse_json(r.text) if c["choices"]]
        pieces = [tc for c in chunks for tc in c["delta"].get("tool_calls", [])]
        assert pieces[0]["function"]["name"] == "add" and pieces[0]["id"].startswith("call_")
        assert all("id" not in p for p in pieces[1:])
        arguments = "".join(p["function"].get("arguments", "") for p in pieces)
        assert json.loads(arguments) == {"a": 1, "b": 1}
        assert chunks[-1]["finish_reason"] == "stop"


async def test_required_still_asks_the_parser() -> None:
    engine = FakeEngine(max_model_len=4096)
    async with fake_client(engine) as (client, _, _):
        r = await client.post("/v1/chat/completions", json=BODY | {"tool_choice": "required"})
        assert r.status_code == 200, r.text
        assert engine.output_requests[-1]["tool_choice"] == "required"
