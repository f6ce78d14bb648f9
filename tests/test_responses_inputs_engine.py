"""``/v1/responses`` refuses deep and unknown tool keys, and deep call arguments, with a
400 on the real engine (tiny model), whose chat template reads the arguments parsed."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.conftest import TINY_MODEL_NAME, Server
from tests.test_responses_inputs import DEEP, SCHEMA, nested

pytestmark = pytest.mark.engine

BODY: Any = {"model": TINY_MODEL_NAME, "input": "Hello", "max_output_tokens": 2}
TOOL: Any = {"type": "function", "name": "get_weather", "parameters": SCHEMA}
CALL: Any = {"type": "function_call", "call_id": "c0", "name": "get_weather"}


def test_deep_and_unknown_tool_keys_and_deep_arguments_are_400(gateway_server: Server) -> None:
    cases = [
        ({"tools": [TOOL | {"x": DEEP}]}, "tools.0.x"),
        ({"tools": [TOOL | {"paramters": SCHEMA}]}, "tools.0.paramters"),
        ({"tools": [TOOL | {"parameters": {"type": "object", "x": DEEP}}]}, "tools.0.parameters"),
        ({"input": [CALL | {"arguments": "[" * 5000}]}, "input.0.arguments"),
    ]
    with httpx.Client(base_url=gateway_server.base_url, timeout=120) as client:
        for extra, param in cases:
            for stream in (False, True):
                raw = json.dumps(BODY | extra | {"stream": stream})
                raw = raw.replace(json.dumps(DEEP), nested(300))
                r = client.post(
                    "/v1/responses", content=raw, headers={"content-type": "application/json"}
                )
                assert r.status_code == 400, (param, stream, r.text[:300])
                assert r.json()["error"]["param"] == param
        r = client.post("/v1/responses", json=BODY | {"tools": [TOOL]})
        assert r.status_code == 200, r.text


def test_chat_arguments_nested_past_the_parser_are_no_500(gateway_server: Server) -> None:
    """On chat, an assistant turn's arguments nested past Python's JSON parser are kept as
    text for the template, and a value too deep for the template is a 400."""
    call = {"id": "c0", "type": "function", "function": {"name": "get_weather"}}
    messages: list[Any] = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c0", "content": "sunny"},
    ]
    with httpx.Client(base_url=gateway_server.base_url, timeout=120) as client:
        for arguments in ("[" * 5000 + "]" * 5000, "{}"):
            call["function"]["arguments"] = arguments
            body = {"model": TINY_MODEL_NAME, "messages": messages, "max_tokens": 2}
            r = client.post("/v1/chat/completions", json=body)
            assert r.status_code in (200, 400), r.text[:300]
            if r.status_code == 400:
                assert r.json()["error"]["param"] == "messages"
        assert r.status_code == 200, r.text
