"""The input of ``/v1/responses`` as chat messages, and the bounds on its free-form JSON.

A string is one user message; items become messages in order (consecutive function
calls one assistant turn with ``tool_calls``, their outputs ``tool`` messages, past
reasoning dropped). An item's keys beyond those read are not checked, but its nesting
is: items are stored, and read back, as JSON.
"""

from __future__ import annotations

import re
from itertools import accumulate
from typing import Any

from gateway.errors import APIError
from gateway.openai_request import schema_depth
from gateway.protocol import ResponsesRequest

MAX_JSON_DEPTH = 128
"""Nesting bound of a ``/v1/responses`` body's free-form JSON: each input item, a
function call's ``arguments`` text, and a tool's ``parameters`` or ``text.format.schema``
whatever ``DLFP_MAX_SCHEMA_DEPTH`` allows. Items are stored and read back as JSON,
arguments parsed for the chat template (``engine_worker.client.output_parser``), schemas echoed
in the Response: pydantic serializes 255 levels at most, the interpreter's JSON codec
about 1,000 less the stack in use, so past a bound a reply would fail after the whole
generation. No client comes near it: an output item sent back as input nests 8."""

_JSON_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)', re.DOTALL)
"""A JSON string, or an unterminated one to the end: every match runs on from a quote
to its end, so the scan is linear whatever the quotes and backslashes."""
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_BRACKET_STEP = {"{": 1, "[": 1, "}": -1, "]": -1}


def json_text_depth(text: str) -> int:
    """The bracket nesting of a JSON text outside its strings: its depth (an empty
    object or list counts 1), and for a text that is not JSON, at least as deep as a
    parser recurses before it finds out."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(accumulate(map(_BRACKET_STEP.__getitem__, brackets)), default=0)


def item_param(i: int, num_history: int) -> str:
    """An input item's ``param``: a stored conversation's items are the request's
    ``previous_response_id``."""
    return f"input.{i - num_history}" if i >= num_history else "previous_response_id"


def check_depth(items: list[dict[str, Any]], num_history: int) -> None:
    """Each item within ``MAX_JSON_DEPTH``, and an ``arguments`` text (a function call's,
    which the chat template reads parsed) too. As long as the body: the lifecycle calls
    it off the event loop (``ResponsesInput.prompt_ids``)."""
    for i, item in enumerate(items):
        param = item_param(i, num_history)
        if schema_depth(item) > MAX_JSON_DEPTH:
            raise APIError(400, f"the item nests deeper than {MAX_JSON_DEPTH} levels", param=param)
        arguments = item.get("arguments")
        if isinstance(arguments, str) and json_text_depth(arguments) > MAX_JSON_DEPTH:
            refused = f"the arguments nest deeper than {MAX_JSON_DEPTH} levels"
            raise APIError(400, refused, param=f"{param}.arguments")


def _text(content: Any, param: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise APIError(400, "content must be a string or a list of parts", param=param)
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in ("input_text", "output_text"):
            raise APIError(400, "only text content parts are supported", param=f"{param}.{j}")
        text = part.get("text", "")
        if not isinstance(text, str):
            raise APIError(400, "a part's text must be a string", param=f"{param}.{j}.text")
        texts.append(text)
    return "".join(texts)


def _string(item: dict[str, Any], key: str, param: str, default: str | None = None) -> str | None:
    """``item[key]``, a string; missing, ``default`` (None: the chat model's check)."""
    value = item.get(key, default)
    if value is not None and not isinstance(value, str):
        raise APIError(400, f"{key} must be a string", param=f"{param}.{key}")
    return value


def _quoted(value: Any) -> str:
    """A value for an error message: a string quoted, anything else by its type only
    (a nested value is never written out)."""
    return repr(value) if isinstance(value, str) else f"of type {type(value).__name__}"


def chat_messages(body: ResponsesRequest, num_history: int) -> list[dict[str, Any]]:
    """The input as chat messages; consecutive function calls share one assistant turn.
    The first ``num_history`` items are a stored conversation's (``previous_response_id``)."""
    messages: list[dict[str, Any]] = []
    if body.instructions:
        messages.append({"role": "system", "content": body.instructions})
    if isinstance(body.input, str):
        return [*messages, {"role": "user", "content": body.input}]
    for i, item in enumerate(body.input):
        kind = item.get("type", "message")
        param = item_param(i, num_history)
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise APIError(400, f"unsupported role {_quoted(role)}", param=f"{param}.role")
            messages.append({"role": role, "content": _text(item.get("content"), param)})
        elif kind == "function_call":
            call = {
                "id": _string(item, "call_id", param),
                "type": "function",
                "function": {
                    "name": _string(item, "name", param),
                    "arguments": _string(item, "arguments", param, ""),
                },
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and last.get("tool_calls"):
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            content = output if isinstance(output, str) else _text(output, param)
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": _string(item, "call_id", param),
                    "content": content,
                }
            )
        elif kind != "reasoning":  # past reasoning is not sent back to the model
            unsupported = f"input items of type {_quoted(kind)} are not supported"
            raise APIError(400, unsupported, param=param)
    return messages
