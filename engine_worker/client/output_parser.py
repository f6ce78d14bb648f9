"""Tool calls and thinking text read from model output, by vLLM's own parsers.

vLLM's server composes the configured tool-call parser (``--tool-call-parser``)
and reasoning parser (``--reasoning-parser``) into one ``Parser``; it adjusts the
request (``tool_choice`` ``required`` or a named function becomes a structured-output
constraint) and reads the output, whole or delta by delta. This module does the same
for an OpenAI chat body and hands the gateway plain ``engine_worker.contract.api`` types.
"""

from __future__ import annotations

import json
from typing import Any

from engine_worker.contract.api import (
    ChatOutput,
    InvalidRequestError,
    OutputParser,
    ParsedOutput,
    ToolCallDelta,
)


def parser_class(
    tool_call_parser: str | None, reasoning_parser: str | None, tokenizer: Any, model: str
) -> Any:
    """vLLM's composed ``Parser`` class, or None; TypeError for an unknown name."""
    from vllm.parser.parser_manager import ParserManager

    return ParserManager.get_parser(
        tool_parser_name=tool_call_parser or None,
        reasoning_parser_name=reasoning_parser or None,
        enable_auto_tools=bool(tool_call_parser),
        model_name=model,
        tokenizer=tokenizer,
    )


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool-call arguments as objects, as vLLM hands them to chat templates."""
    out = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            message = dict(message, tool_calls=[_with_object_arguments(c) for c in calls])
        out.append(message)
    return out


def _with_object_arguments(call: dict[str, Any]) -> dict[str, Any]:
    function = dict(call.get("function") or {})
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except (json.JSONDecodeError, RecursionError):  # not JSON, or nested past the parser
        return call
    if isinstance(arguments, dict):
        function["arguments"] = arguments
    return dict(call, function=function)


def _compact(structural_tag: str) -> str:
    """At most one whitespace in a row inside the tag's JSON (xgrammar refuses 0).

    Structural tags ignore the engine's ``disable_any_whitespace``, and with unbounded
    whitespace a weak model pads the arguments until max_tokens. Walked with a stack,
    not by recursion, so that no nesting depth can exhaust the interpreter's stack."""
    root = json.loads(structural_tag)
    stack: list[Any] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "max_whitespace_cnt" in node and node["max_whitespace_cnt"] is None:
                node["max_whitespace_cnt"] = 1
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return json.dumps(root)


def chat_output(
    parser_cls: Any,
    tokenizer: Any,
    body: dict[str, Any],
    prompt_token_ids: list[int],
    compact_json: bool = True,
) -> ChatOutput:
    """The constraints and per-choice parsers for one chat body."""
    from pydantic import ValidationError
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    if parser_cls is None:
        return ChatOutput()
    has_reasoning = parser_cls.reasoning_parser_cls is not None
    uses_tools = bool(body.get("tools")) and body.get("tool_choice") != "none"
    if not uses_tools and not has_reasoning:
        return ChatOutput()
    try:
        request = ChatCompletionRequest.model_validate(body)
        request = parser_cls(tokenizer, request.tools).adjust_request(request)
    except (ValidationError, ValueError, TypeError) as exc:
        raise InvalidRequestError(f"invalid tools or tool_choice: {exc}", "tool_choice") from exc
    constraints: dict[str, Any] = {"skip_special_tokens": bool(request.skip_special_tokens)}
    structured = request.structured_outputs
    if structured is not None and structured.structural_tag is not None:
        tag = structured.structural_tag
        constraints["structural_tag"] = _compact(tag) if compact_json else tag
    elif structured is not None and isinstance(structured.json, dict):
        constraints["json_schema"] = structured.json
    elif structured is not None and isinstance(structured.json, str):
        constraints["json_schema"] = json.loads(structured.json)

    def new_parser() -> OutputParser:
        return VLLMOutputParser(parser_cls(tokenizer, request.tools), request, prompt_token_ids)

    return ChatOutput(constraints=constraints, new_parser=new_parser)


class VLLMOutputParser:
    """One choice's output read by a vLLM ``Parser`` instance."""

    def __init__(self, parser: Any, request: Any, prompt_token_ids: list[int]) -> None:
        self._parser = parser
        self._request = request
        self._prompt_token_ids = prompt_token_ids
        self._is_auto = parser.tool_parser is not None

    def parse(self, text: str, token_ids: list[int]) -> ParsedOutput:
        from vllm.renderers.chat_utils import make_tool_call_id

        reasoning, content, calls = self._parser.parse(
            text, self._request, enable_auto_tools=self._is_auto, model_output_token_ids=token_ids
        )
        tool_calls = [
            ToolCallDelta(
                index=i, id=c.id or make_tool_call_id(), name=c.name, arguments=c.arguments
            )
            for i, c in enumerate(calls or [])
        ]
        return ParsedOutput(content=content, reasoning=reasoning, tool_calls=tool_calls)

    def parse_delta(self, text: str, token_ids: list[int], finished: bool) -> ParsedOutput | None:
        message = self._parser.parse_delta(
            text, list(token_ids), self._request, self._prompt_token_ids, finished=finished
        )
        if message is None:
            return None
        tool_calls = [
            ToolCallDelta(
                index=tc.index,
                id=tc.id,
                name=tc.function.name if tc.function is not None else None,
                arguments=tc.function.arguments if tc.function is not None else None,
            )
            for tc in message.tool_calls or []
        ]
        return ParsedOutput(
            content=message.content, reasoning=message.reasoning, tool_calls=tool_calls
        )
