"""What ``/v1/responses`` takes in its tools, formats and items, and that no nesting of
its free-form JSON reaches a 500 (quick tier, FAKE engine).

A deep value is sent as raw JSON text: the client's own encoder recurses, and would fail
first at 1,000 levels.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.protocol import MAX_FORMAT_DESCRIPTION_CHARS
from gateway.responses_input import MAX_JSON_DEPTH, json_text_depth
from tests.fakes import FakeEngine
from tests.http_helpers import fake_client, sse_json

BODY: Any = {"model": "fake-model", "input": "hi", "max_output_tokens": 3}
SCHEMA: Any = {"type": "object", "properties": {"city": {"type": "string"}}}
JSON = {"content-type": "application/json"}
DEEP = "<deep>"
"""Where a body template takes the nested value."""


def nested(depth: int) -> str:
    """A JSON object ``depth`` levels deep, as text."""
    return '{"a":' * depth + "1" + "}" * depth


def _raw(template: Any, depth: int, stream: bool) -> str:
    body = BODY | template | {"stream": stream}
    return json.dumps(body).replace(json.dumps(DEEP), nested(depth))


def _is_openai_error(r: Any) -> bool:
    error = r.json().get("error")
    return (
        isinstance(error, dict)
        and isinstance(error.get("message"), str)
        and error.get("type") == "invalid_request_error"
        and {"param", "code"} <= set(error)
    )


def _tool(**keys: Any) -> dict[str, Any]:
    return {"type": "function", "name": "get_weather", "parameters": SCHEMA} | keys


def _call(arguments: Any) -> dict[str, Any]:
    return {"type": "function_call", "call_id": "c0", "name": "get_weather", "arguments": arguments}


REFUSED_DEEP: dict[str, Any] = {
    "tools.0.parameters": {"tools": [_tool(parameters={"type": "object", "x": DEEP})]},
    "tools.0.<unknown key>": {"tools": [_tool(x=DEEP)]},
    "tools.0.output_schema": {"tools": [_tool(output_schema=DEEP)]},
    "tools.0 (built-in)": {"tools": [{"type": "web_search", "filters": DEEP}]},
    "tool_choice": {"tool_choice": DEEP},
    "text.format.schema": {
        "text": {"format": {"type": "json_schema", "name": "s", "schema": {"x": DEEP}}}
    },
    "text.format.schema (json_object)": {
        "text": {"format": {"type": "json_object", "schema": {"x": DEEP}}}
    },
    "input.0.<unknown key>": {"input": [{"role": "user", "content": "hi", "x": DEEP}]},
    "input.0.content.0.<unknown key>": {
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi", "x": DEEP}]}]
    },
    "input.0.content.0.text": {
        "input": [{"role": "user", "content": [{"type": "input_text", "text": DEEP}]}]
    },
    "input.0.arguments": {"input": [_call(DEEP)]},
    "input.1.output": {
        "input": [_call("{}"), {"type": "function_call_output", "call_id": "c0", "output": DEEP}]
    },
    "input.1 (reasoning)": {
        "input": [{"role": "user", "content": "hi"}, {"type": "reasoning", "summary": DEEP}]
    },
    "input.0.id (item_reference)": {"input": [{"type": "item_reference", "id": DEEP}]},
    "input.0.role": {"input": [{"role": DEEP, "content": "hi"}]},
    "input.0.type": {"input": [{"type": DEEP}]},
    "reasoning": {"reasoning": {"effort": DEEP}},
    "prompt": {"prompt": DEEP},
    "conversation": {"conversation": DEEP},
    "context_management": {"context_management": [DEEP]},
    "documents": {"documents": DEEP},
    "previous_input_messages": {"previous_input_messages": [DEEP]},
    "structured_outputs": {"structured_outputs": DEEP},
    "vllm_xargs": {"vllm_xargs": DEEP},
    "chat_template_kwargs": {"chat_template_kwargs": DEEP},
    "<unknown field>": {"no_such_field": DEEP},
}
"""Every free-form value of a Responses body: each nested 300 levels is a 400."""

DROPPED_DEEP: dict[str, Any] = {
    "metadata": {"metadata": DEEP},
    "client_metadata": {"client_metadata": DEEP},
    "kv_transfer_params": {"kv_transfer_params": DEEP},
}
"""Ignored fields: dropped before validation, they reach nothing that could fail."""


@pytest.mark.parametrize("field", list(REFUSED_DEEP) + list(DROPPED_DEEP))
async def test_no_free_form_value_at_any_depth_is_a_500(field: str) -> None:
    template = REFUSED_DEEP.get(field) or DROPPED_DEEP[field]
    async with fake_client(FakeEngine(max_model_len=100_000)) as (client, _, engine):
        for depth in (300, 1000):
            for stream in (False, True):
                raw = _raw(template, depth, stream)
                r = await client.post("/v1/responses", content=raw, headers=JSON)
                where = (depth, stream, r.text[:300])
                if field in DROPPED_DEEP and depth == 300:
                    assert r.status_code == 200, where
                    assert '"a":{"a"' not in r.text, where  # nothing of it is echoed
                    continue
                assert 400 <= r.status_code < 500, where
                assert _is_openai_error(r), where
        assert len(engine.submitted) == (2 if field in DROPPED_DEEP else 0)
        r = await client.post("/v1/responses", json=BODY)
        assert r.status_code == 200, r.text


async def test_an_item_stored_and_read_back_at_any_depth_the_parser_takes_is_no_500() -> None:
    """Stored items are encoded after the reply and decoded by the next turn, deeper in
    the stack than the body's parser: past the item bound they never get there."""
    template = {"input": [{"role": "user", "content": "hi", "x": DEEP}]}
    async with fake_client() as (client, _, engine):
        for depth in [MAX_JSON_DEPTH - 2, *range(900, 1000, 3)]:
            raw = _raw(template, depth, stream=False)
            r = await client.post("/v1/responses", content=raw, headers=JSON)
            if depth < MAX_JSON_DEPTH:
                assert r.status_code == 200, r.text
                turn = BODY | {"previous_response_id": r.json()["id"]}
                assert (await client.post("/v1/responses", json=turn)).status_code == 200
            else:
                assert r.status_code == 400 and _is_openai_error(r), (depth, r.text[:300])
        assert len(engine.submitted) == 2


async def test_a_deep_schema_is_400_whatever_the_schema_depth_setting() -> None:
    """The schemas are echoed in the Response, which pydantic serializes 255 levels deep
    at most: past ``MAX_JSON_DEPTH`` a schema is refused even where the setting allows it."""
    deep: Any = {"type": "string"}
    for _ in range(150):
        deep = {"type": "object", "properties": {"a": deep}}
    fmt = {"type": "json_schema", "name": "s", "schema": deep}
    cases = [({"tools": [_tool(parameters=deep)]}, "tools.0.parameters")]
    cases.append(({"text": {"format": fmt}}, "text.format.schema"))
    async with fake_client(max_schema_depth=1000, max_schema_bytes=1_000_000) as (client, _, _):
        for extra, param in cases:
            r = await client.post("/v1/responses", json=BODY | extra)
            assert r.status_code == 400, r.text
            assert r.json()["error"]["param"] == param
            assert str(MAX_JSON_DEPTH) in r.json()["error"]["message"]


async def test_an_arguments_text_nested_past_the_bound_is_400_naming_it() -> None:
    """The chat template reads a call's arguments parsed: a text the parser recurses
    through too deeply would fail there, after the request was admitted."""
    deep_text = "[" * 5000
    async with fake_client() as (client, _, engine):
        for arguments in (deep_text, nested(MAX_JSON_DEPTH + 1)):
            r = await client.post("/v1/responses", json=BODY | {"input": [_call(arguments)]})
            assert r.status_code == 400, r.text
            assert r.json()["error"]["param"] == "input.0.arguments"
        within = BODY | {"input": [_call(nested(MAX_JSON_DEPTH - 1)), _call("not json [")]}
        assert (await client.post("/v1/responses", json=within)).status_code == 200
        assert len(engine.submitted) == 1


def test_the_arguments_depth_reads_strings_as_json_does() -> None:
    assert json_text_depth('{"a": 1}') == 1
    assert json_text_depth("[[1], [2, [3]]]") == 3
    assert json_text_depth('{"a": "[[[[{{{{", "b": "\\"[["}') == 1
    assert json_text_depth('{"a": "\\\\"} [[') == 2  # an escaped backslash ends no string
    assert json_text_depth('"unterminated [[[[') == 0
    assert json_text_depth("") == json_text_depth("12") == 0
    # Quotes and backslashes that a naive string pattern rescans from every quote.
    for hostile in ('"' + '\\"' * 200_000, '"\\' * 200_000, '"' * 400_000):
        assert json_text_depth(hostile) == 0


async def test_an_unknown_function_tool_key_is_400_naming_it() -> None:
    misspelt = {"type": "function", "name": "get_weather", "paramters": SCHEMA}
    async with fake_client() as (client, _, engine):
        for stream in (False, True):
            body = BODY | {"tools": [misspelt], "stream": stream}
            r = await client.post("/v1/responses", json=body)
            assert r.status_code == 400, r.text
            assert r.json()["error"]["param"] == "tools.0.paramters"
            assert "paramters" in r.json()["error"]["message"]
        assert engine.submitted == []


SDK_TOOLS: dict[str, Any] = {
    # openai.lib._tools.pydantic_function_tool's Responses form, and its defer_loading.
    "openai": _tool(description="Weather.", strict=True, defer_loading=False),
    # agents.models.openai_responses.Converter._convert_function_tool (description may
    # be None, sent as null).
    "openai-agents": _tool(description=None, strict=True),
    # @ai-sdk/openai's prepareFunctionTool: async and defer_loading from provider options.
    "ai-sdk": _tool(description="Weather.", strict=False, **{"async": False}),
    # langchain-openai and llama-index-llms-openai: the chat form's function, flattened.
    "langchain": _tool(description="Weather."),
    "agents-callers": _tool(allowed_callers=["direct"], output_schema=None),
}
"""What the clients send for a function tool, with OpenAI's other keys at their no-op."""


@pytest.mark.parametrize("client_name", list(SDK_TOOLS))
async def test_what_clients_send_for_a_function_tool_is_accepted_and_echoed(
    client_name: str,
) -> None:
    tool = SDK_TOOLS[client_name]
    sent = {k: v for k, v in tool.items() if v is not None}
    async with fake_client() as (client, _, engine):
        reply = await client.post("/v1/responses", json=BODY | {"tools": [tool]})
        assert reply.status_code == 200, reply.text
        assert reply.json()["tools"] == [sent]
        [rendered] = engine.rendered_tools or []
        assert rendered["function"]["name"] == "get_weather"
        assert rendered["function"]["parameters"] == SCHEMA
        r = await client.post("/v1/responses", json=BODY | {"tools": [tool], "stream": True})
        events = sse_json(r.text)
        assert [e["response"]["tools"] for e in events if "response" in e] == [[sent]] * 3


async def test_a_built_in_tool_is_refused_whatever_its_keys() -> None:
    async with fake_client() as (client, _, _):
        for tool in ({"type": "web_search"}, {"type": "file_search", "vector_store_ids": ["v"]}):
            r = await client.post("/v1/responses", json=BODY | {"tools": [tool]})
            assert r.status_code == 400, r.text
            assert r.json()["error"]["param"] == "tools.0"
            assert f"built-in tools ({tool['type']})" in r.json()["error"]["message"]


async def test_an_over_long_format_description_is_400_naming_it() -> None:
    def fmt(description: str) -> Any:
        text = {"type": "json_schema", "name": "s", "schema": SCHEMA, "description": description}
        return {"text": {"format": text}}

    longest = "d" * MAX_FORMAT_DESCRIPTION_CHARS
    async with fake_client() as (client, _, engine):
        for stream in (False, True):
            body = BODY | fmt(longest + "d") | {"stream": stream}
            r = await client.post("/v1/responses", json=body)
            assert r.status_code == 400, r.text
            assert r.json()["error"]["param"] == "text.format.description"
        assert engine.submitted == []
        reply = await client.post("/v1/responses", json=BODY | fmt(longest))
        assert reply.status_code == 200, reply.text
        assert reply.json()["text"]["format"]["description"] == longest
        assert longest not in json.dumps(engine.output_requests[-1])  # not for the model


async def test_a_schema_on_a_format_that_takes_none_is_400() -> None:
    async with fake_client() as (client, _, _):
        for kind in ("text", "json_object"):
            fmt = {"type": kind, "schema": SCHEMA}
            r = await client.post("/v1/responses", json=BODY | {"text": {"format": fmt}})
            assert r.status_code == 400, r.text
            assert r.json()["error"]["param"] == "text.format.schema"
