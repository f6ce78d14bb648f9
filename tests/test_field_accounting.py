"""Every field of vLLM's own request models is accounted for (quick tier, FAKE engine).

A field is honoured (a field of the gateway's request model), refused unless sent with
its no-op value (marked ``Refused``), ignored as harmless (``IGNORED_REASONS``), or
unknown to the gateway and so a 400 naming it (``UNKNOWN`` below). A field a later
vLLM adds fails ``test_every_vllm_request_field_is_accounted_for`` until it is sorted
into one of these. So does a key of OpenAI's Responses function tool (vLLM takes the
``openai`` package's), honoured or refused as ``tools.N.key``; any other is a 400.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from gateway.protocol import (
    IGNORED_REASONS,
    ChatCompletionRequest,
    CompletionRequest,
    ResponsesRequest,
    ResponsesTool,
    refused_fields,
)
from tests.http_helpers import fake_client

ROOT = Path(__file__).resolve().parent.parent

UNKNOWN: dict[str, set[str]] = {"chat": set(), "completions": set(), "responses": set()}
"""vLLM's request fields the gateway does not take at all: a 400 naming the field."""

OURS: dict[str, type[BaseModel]] = {
    "chat": ChatCompletionRequest,
    "completions": CompletionRequest,
    "responses": ResponsesRequest,
}
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
PATHS["responses"] = "/v1/responses"
BODIES: dict[str, dict[str, Any]] = {
    "chat": {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]},
    "completions": {"model": "fake-model", "prompt": "hi"},
    "responses": {"model": "fake-model", "input": "hi"},
}
BODIES["chat"]["max_tokens"] = BODIES["completions"]["max_tokens"] = 2
BODIES["responses"]["max_output_tokens"] = 2

NOT_NO_OP: dict[str, Any] = {
    "add_generation_prompt": False,
    "add_special_tokens": "flip",
    "audio": {"voice": "alloy", "format": "wav"},
    "background": True,
    "chat_template": "{{ messages }}",
    "chat_template_kwargs": {"enable_thinking": False},
    "context_management": [{"type": "compaction", "compact_threshold": 1000}],
    "continue_final_message": True,
    "conversation": "conv_1",
    "documents": [{"title": "t", "text": "x"}],
    "echo": True,
    "enable_response_messages": True,
    "length_penalty": 0.5,
    "logprob_token_ids": [1],
    "modalities": ["text", "audio"],
    "prediction": {"type": "content", "content": "x"},
    "previous_input_messages": [{"role": "user", "content": "x"}],
    "prompt": {"id": "pmpt_1"},
    "prompt_embeds": "AAAA",
    "prompt_logprobs": 0,
    "reasoning": {"effort": "high"},
    "reasoning_effort": "low",
    "repetition_detection": {"max_pattern_size": 4, "min_count": 3},
    "return_prompt_text": True,
    "return_tokens_as_token_ids": True,
    "structured_outputs": {"regex": "a+"},
    "suffix": "the end",
    "thinking_token_budget": 16,
    "truncate_prompt_tokens": 8,
    "truncation": "auto",
    "use_beam_search": True,
    "vllm_xargs": {"plugin": 1},
    "web_search_options": {},
}
"""A value with an effect, for every refused field ("flip": the opposite of its default)."""

TOOL_NOT_NO_OP: dict[str, Any] = {
    "defer_loading": True,
    "async": True,
    "allowed_callers": ["programmatic"],
    "output_schema": {"type": "object"},
}
"""The same for the refused keys of a ``/v1/responses`` function tool."""
TOOL: dict[str, Any] = {"type": "function", "name": "add", "parameters": {"type": "object"}}


def _tool_keys(model: type[BaseModel], names: set[str] | dict[str, Any]) -> set[str]:
    """Field names as a body spells them (``async``, not ``async_``)."""
    return {model.model_fields[name].alias or name for name in names}


def _every_refused() -> set[str]:
    """Every refused field, a tool's as ``tools.N.key``: what docs/api.md's table lists."""
    top = {name for model in OURS.values() for name in refused_fields(model)}
    tool = _tool_keys(ResponsesTool, refused_fields(ResponsesTool))
    return top | {f"tools.N.{key}" for key in tool}


def _vllm_models() -> dict[str, type[BaseModel]]:
    from vllm.entrypoints.openai.chat_completion import protocol as chat
    from vllm.entrypoints.openai.completion import protocol as completion
    from vllm.entrypoints.openai.responses import protocol as responses

    return {
        "chat": chat.ChatCompletionRequest,
        "completions": completion.CompletionRequest,
        "responses": responses.ResponsesRequest,
    }


def _refused(endpoint: str) -> dict[str, Any]:
    """Each refused field of the endpoint's model, with its default."""
    model = OURS[endpoint]
    return {name: model.model_fields[name].default for name in refused_fields(model)}


def _value_with_effect(endpoint: str, name: str) -> Any:
    value = NOT_NO_OP[name]
    return (not _refused(endpoint)[name]) if value == "flip" else value


def test_every_vllm_request_field_is_accounted_for() -> None:
    for endpoint, theirs in _vllm_models().items():
        ours = OURS[endpoint]
        fields = set(ours.model_fields)
        refused = set(refused_fields(ours))
        honoured = fields - refused
        ignored, unknown = set(ours.ignored), UNKNOWN[endpoint]  # type: ignore[attr-defined]
        unaccounted = set(theirs.model_fields) - honoured - refused - ignored - unknown
        assert unaccounted == set(), (endpoint, sorted(unaccounted))
        # Each field is in one place only: an ignored field is dropped before validation.
        assert fields & ignored == set(), (endpoint, sorted(fields & ignored))
        assert (fields | ignored) & unknown == set(), (endpoint, sorted(unknown & fields))
        assert unknown <= set(theirs.model_fields), (endpoint, sorted(unknown))


def test_every_openai_function_tool_key_is_accounted_for() -> None:
    from openai.types.responses import FunctionTool

    theirs = _tool_keys(FunctionTool, set(FunctionTool.model_fields))
    ours = _tool_keys(ResponsesTool, set(ResponsesTool.model_fields))
    assert theirs == ours


def test_each_ignored_field_says_why_and_each_refused_one_has_a_test_value() -> None:
    assert all(reason.strip() for reason in IGNORED_REASONS.values())
    every_refused = {name for model in OURS.values() for name in refused_fields(model)}
    assert every_refused == set(NOT_NO_OP)
    assert _tool_keys(ResponsesTool, refused_fields(ResponsesTool)) == set(TOOL_NOT_NO_OP)


def _fields_section() -> str:
    text = (ROOT / "docs" / "api.md").read_text()
    return text.split("## No field is silently ignored", 1)[1].split("\n## ", 1)[0]


def _table_fields(section: str, header: str) -> set[str]:
    """The backquoted names in the first column of the table whose header is ``header``."""
    table = section.split(header, 1)[1].split("\n\n", 1)[0]
    rows = [line.split("|")[1] for line in table.splitlines()[2:] if line.startswith("|")]
    return {name for row in rows for name in re.findall(r"`([a-zA-Z_.]+)`", row)}


def test_the_docs_tables_match_the_code() -> None:
    section = _fields_section()
    assert _table_fields(section, "| field | why it has no effect |") == set(IGNORED_REASONS)
    assert _table_fields(section, "| field | accepted | why it is refused |") == _every_refused()


@pytest.mark.parametrize("endpoint", list(OURS))
async def test_refused_fields_are_400_naming_them_unless_no_op(endpoint: str) -> None:
    wrong = []
    async with fake_client() as (client, _, _):
        for name, default in _refused(endpoint).items():
            body = BODIES[endpoint] | {name: _value_with_effect(endpoint, name)}
            r = await client.post(PATHS[endpoint], json=body)
            if r.status_code != 400 or r.json()["error"]["param"] != name:
                wrong.append((name, "refused", r.status_code, r.text[:200]))
            also = refused_fields(OURS[endpoint])[name].also
            for no_op in (default, *also):
                r = await client.post(PATHS[endpoint], json=BODIES[endpoint] | {name: no_op})
                if r.status_code != 200:
                    wrong.append((name, "no-op", r.status_code, r.text[:200]))
    assert wrong == []


async def test_refused_function_tool_keys_are_400_naming_them_unless_no_op() -> None:
    wrong = []
    body = BODIES["responses"]
    async with fake_client() as (client, _, _):
        for name, marker in refused_fields(ResponsesTool).items():
            field = ResponsesTool.model_fields[name]
            key = field.alias or name
            r = await client.post(
                "/v1/responses", json=body | {"tools": [TOOL | {key: TOOL_NOT_NO_OP[key]}]}
            )
            if r.status_code != 400 or r.json()["error"]["param"] != f"tools.0.{key}":
                wrong.append((key, "refused", r.status_code, r.text[:200]))
            for no_op in (field.default, *marker.also):
                r = await client.post("/v1/responses", json=body | {"tools": [TOOL | {key: no_op}]})
                if r.status_code != 200:
                    wrong.append((key, "no-op", r.status_code, r.text[:200]))
    assert wrong == []


@pytest.mark.parametrize("endpoint", list(OURS))
async def test_unknown_vllm_fields_are_400_naming_them(endpoint: str) -> None:
    wrong = []
    async with fake_client() as (client, _, _):
        for name in sorted(UNKNOWN[endpoint]):
            r = await client.post(PATHS[endpoint], json=BODIES[endpoint] | {name: 1})
            if r.status_code != 400 or r.json()["error"]["param"] != name:
                wrong.append((name, r.status_code, r.text[:200]))
    assert wrong == []


@pytest.mark.parametrize("endpoint", list(OURS))
async def test_ignored_fields_are_accepted(endpoint: str) -> None:
    values = {name: "x" for name in OURS[endpoint].ignored}  # type: ignore[attr-defined]
    async with fake_client() as (client, _, engine):
        r = await client.post(PATHS[endpoint], json=BODIES[endpoint] | values)
        assert r.status_code == 200, r.text
        assert len(engine.submitted) == 1


def test_honoured_fields_reach_vllms_sampling_params() -> None:
    from engine_worker.client.request_stream import _sampling_params
    from engine_worker.contract.api import SamplingOptions

    options = SamplingOptions(
        max_tokens=8,
        min_tokens=2,
        stop_token_ids=(7,),
        include_stop_str_in_output=True,
        skip_special_tokens=False,
        spaces_between_special_tokens=False,
        bad_words=("fake",),
        allowed_token_ids=(1, 2),
        watermarking=False,
    )
    params = _sampling_params(options)
    assert (params.min_tokens, params.stop_token_ids, params.bad_words) == (2, [7], ["fake"])
    assert params.include_stop_str_in_output and not params.skip_special_tokens
    assert not params.spaces_between_special_tokens and params.watermarking is False
    assert params.allowed_token_ids == [1, 2]
    default = _sampling_params(SamplingOptions(max_tokens=8))
    assert default.allowed_token_ids is None and default.watermarking is None
    assert (default.min_tokens, default.stop_token_ids, default.bad_words) == (0, [], [])
