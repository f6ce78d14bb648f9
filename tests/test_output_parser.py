"""vLLM's parsers behind engine_worker.client.output_parser, on canned output (quick tier).

The text is fixed, so these need no engine: only the tiny model's tokenizer and
vLLM's parser classes, as the real engine composes them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine_worker.client.output_parser import chat_output, parser_class, template_messages
from engine_worker.contract.api import ParsedOutput
from tests.tiny_model import make_tiny_model

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
BODY: dict[str, Any] = {
    "model": "m",
    "messages": [{"role": "user", "content": "Weather in Paris?"}],
    "tools": [WEATHER],
    "tool_choice": "auto",
}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
THINK = "<think>The user wants Paris.</think>"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from vllm.tokenizers import get_tokenizer

    model_dir: Path = make_tiny_model(tmp_path_factory.mktemp("parser") / "tiny")
    return get_tokenizer(str(model_dir))


def _streamed(tokenizer: Any, parser: Any, text: str) -> list[ParsedOutput]:
    """Feed ``text`` one token at a time, as the engine streams it."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    out = []
    for i in range(len(ids)):
        piece = tokenizer.decode(ids[: i + 1])[len(tokenizer.decode(ids[:i])) :]
        parsed = parser.parse_delta(piece, [ids[i]], i == len(ids) - 1)
        if parsed is not None:
            out.append(parsed)
    return out


def test_auto_reads_a_hermes_tool_call(tokenizer: Any) -> None:
    output = chat_output(parser_class("hermes", None, tokenizer, "m"), tokenizer, BODY, [1])
    text = "Let me look.\n" + CALL
    parsed = output.new_parser().parse(text, tokenizer.encode(text)) if output.new_parser else None
    assert parsed is not None and parsed.content == "Let me look.\n"
    [call] = parsed.tool_calls
    assert call.name == "get_weather" and json.loads(call.arguments or "") == {"city": "Paris"}
    assert call.id and call.id.startswith("chatcmpl-tool-")


def test_auto_streams_the_call_in_pieces(tokenizer: Any) -> None:
    output = chat_output(parser_class("hermes", None, tokenizer, "m"), tokenizer, BODY, [1])
    assert output.new_parser is not None
    deltas = _streamed(tokenizer, output.new_parser(), "Sure.\n" + CALL)
    content = "".join(d.content or "" for d in deltas)
    calls = [c for d in deltas for c in d.tool_calls]
    assert content == "Sure.\n"
    assert [c.id is not None for c in calls].count(True) == 1 and calls[0].name == "get_weather"
    assert {c.index for c in calls} == {0}
    arguments = "".join(c.arguments or "" for c in calls)
    assert json.loads(arguments) == {"city": "Paris"}


def test_text_without_a_call_is_content(tokenizer: Any) -> None:
    output = chat_output(parser_class("hermes", None, tokenizer, "m"), tokenizer, BODY, [1])
    assert output.new_parser is not None
    parsed = output.new_parser().parse("It is sunny.", [])
    assert parsed.content == "It is sunny." and parsed.tool_calls == []


def test_no_tools_and_no_reasoning_parser_reads_nothing(tokenizer: Any) -> None:
    body = {k: v for k, v in BODY.items() if k not in ("tools", "tool_choice")}
    output = chat_output(parser_class("hermes", None, tokenizer, "m"), tokenizer, body, [1])
    assert output.new_parser is None and output.constraints == {}


def test_reasoning_split_on_think(tokenizer: Any) -> None:
    body = {k: v for k, v in BODY.items() if k not in ("tools", "tool_choice")}
    output = chat_output(parser_class("hermes", "qwen3", tokenizer, "m"), tokenizer, body, [1])
    assert output.new_parser is not None
    text = THINK + "The capital of France is Paris."
    parsed = output.new_parser().parse(text, [])
    assert parsed.reasoning == "The user wants Paris."
    assert parsed.content == "The capital of France is Paris."
    deltas = _streamed(tokenizer, output.new_parser(), text)
    assert "".join(d.reasoning or "" for d in deltas) == "The user wants Paris."
    assert "".join(d.content or "" for d in deltas) == "The capital of France is Paris."


def test_forced_call_is_a_structured_output_constraint(tokenizer: Any) -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    for choice in ("required", named):
        body = BODY | {"tool_choice": choice}
        output = chat_output(parser_class("hermes", None, tokenizer, "m"), tokenizer, body, [1])
        constraint = output.constraints.get("structural_tag") or output.constraints["json_schema"]
        assert "get_weather" in json.dumps(constraint)


def test_template_messages_hand_arguments_as_objects() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    [message] = template_messages([{"role": "assistant", "content": "", "tool_calls": [call]}])
    assert message["tool_calls"][0]["function"]["arguments"] == {"a": 1}


def test_every_vllm_request_field_is_honoured_or_ignored() -> None:
    """A field vLLM's server takes is honoured or ignored here, or refused on purpose."""
    from vllm.entrypoints.openai.chat_completion import protocol as vllm_chat
    from vllm.entrypoints.openai.completion import protocol as vllm_completion

    from gateway.protocol import IGNORED_FIELDS, ChatCompletionRequest, CompletionRequest

    pairs = [
        (vllm_chat.ChatCompletionRequest, ChatCompletionRequest, set()),
        # Refused as unknown: an insertion suffix, and embeddings instead of a prompt.
        (vllm_completion.CompletionRequest, CompletionRequest, {"suffix", "prompt_embeds"}),
    ]
    for theirs, ours, refused in pairs:
        missing = set(theirs.model_fields) - set(ours.model_fields) - IGNORED_FIELDS - refused
        assert missing == set(), (ours.__name__, sorted(missing))
