"""``POST /v1/responses``, stateless: a Responses body is served as a chat completion.

The input (a string, or messages, function calls and their outputs) becomes chat
messages (``responses_input``), ``instructions`` a system message, ``text.format`` a
``response_format``; the chat lifecycle, admission, parsers and metrics
(``endpoint="responses"``) then apply unchanged. The reply is a Response object, or
streamed, the event sequence vLLM's server emits: ``response.created``,
``response.in_progress``, per output item ``response.output_item.added`` ...
``response.output_item.done``, ``response.completed``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from engine_worker.contract.api import ChoiceDelta, Engine, OutputParser
from gateway.errors import APIError, first_error
from gateway.openai_format import ChatFormatter, Formatter, chat_logprobs
from gateway.openai_request import ChatInput
from gateway.protocol import (
    AssistantMessage,
    ChatCompletionRequest,
    EngineFields,
    NamedResponsesTool,
    ResponseObject,
    ResponsesRequest,
    Usage,
)
from gateway.responses_input import MAX_JSON_DEPTH, chat_messages, check_depth
from gateway.stored_responses import Conversation, Keeper

SHARED_WITH_CHAT = {
    "model",
    "temperature",
    "top_p",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "top_k",
    "min_p",
    "repetition_penalty",
    "ignore_eos",
    "include_reasoning",
    "parallel_tool_calls",
    "stream",
    "priority",
    "cache_salt",
}
"""The Responses fields that a chat body takes as they are."""


def _chat_body(body: ResponsesRequest, num_history: int) -> dict[str, Any]:
    tools = []
    for tool in body.tools or []:
        function: dict[str, Any] = {"name": tool.name, "description": tool.description}
        function |= {"parameters": tool.parameters, "strict": tool.strict}
        tools.append({"type": "function", "function": function})
    chat: dict[str, Any] = {
        "messages": chat_messages(body, num_history),
        "max_tokens": body.max_output_tokens,
        "tools": tools or None,
        **body.model_dump(include=SHARED_WITH_CHAT),
        **body.model_dump(include=set(EngineFields.model_fields)),
    }
    if body.wants_logprobs():
        chat |= {"logprobs": True, "top_logprobs": body.top_logprobs or 0}
    choice = body.tool_choice
    chat["tool_choice"] = (
        {"type": "function", "function": {"name": choice.name}}
        if isinstance(choice, NamedResponsesTool)
        else choice
    )
    if body.max_tool_calls == 0 and tools:
        chat["tool_choice"] = "none"
    fmt = body.text.format if body.text else None
    if fmt is not None and fmt.type == "json_schema":
        schema = {"name": fmt.name, "schema": fmt.schema_ or {}, "strict": fmt.strict}
        chat["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif fmt is not None:
        chat["response_format"] = {"type": fmt.type}
    return chat


class ResponsesInput(ChatInput):
    endpoint = "responses"
    id_prefix = "resp"
    prompt_param = "input"

    def __init__(
        self,
        body: ResponsesRequest,
        conversation: Conversation | None = None,
        keeper: Keeper | None = None,
    ) -> None:
        """``conversation``: the input with its references resolved (``stored_responses``);
        ``keeper``: where the finished response is stored, if it is to be."""
        self.request = body
        self.keeper = keeper
        num_history = 0
        if conversation is not None:
            body = body.model_copy(update={"input": conversation.all_items})
            num_history = len(conversation.history)
        self._items = body.input if isinstance(body.input, list) else []
        self._num_history = num_history
        try:
            chat = ChatCompletionRequest.model_validate(_chat_body(body, num_history))
        except ValidationError as exc:
            first = first_error(exc.errors())
            raise APIError(400, f"{first.param}: {first.message}", param=first.param) from exc
        super().__init__(chat)

    def schemas(self) -> list[tuple[str, Any]]:
        request = self.request
        found = [
            (f"tools.{i}.parameters", tool.parameters)
            for i, tool in enumerate(request.tools or [])
            if tool.parameters is not None
        ]
        fmt = request.text.format if request.text is not None else None
        if fmt is not None and fmt.schema_ is not None:
            found.append(("text.format.schema", fmt.schema_))
        return found

    def check_limits(self, max_tools: int, max_depth: int, max_bytes: int) -> None:
        """The chat bounds, and ``MAX_JSON_DEPTH`` whatever the setting: a schema is
        echoed in the Response."""
        super().check_limits(max_tools, min(max_depth, MAX_JSON_DEPTH), max_bytes)

    def prompt_ids(self, engine: Engine) -> list[int]:
        check_depth(self._items, self._num_history)
        return super().prompt_ids(engine)

    def formatter(self, completion_id: str, model: str) -> Formatter:
        return ResponsesFormatter(
            self.request, self.body, completion_id, model, self.output.new_parser, self.keeper
        )


def _output_items(
    message: AssistantMessage, logprobs: list[dict[str, Any]], max_calls: int | None
) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if message.reasoning:
        items.append(
            {
                "type": "reasoning",
                "id": f"rs_{uuid.uuid4().hex}",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": message.reasoning}],
                "status": "completed",
            }
        )
    if message.content:
        item_id = f"msg_{uuid.uuid4().hex}"
        items.append(_message_item(item_id, message.content, "completed", logprobs))
    for call in message.tool_calls[:max_calls]:
        items.append(
            _call_item(
                f"fc_{uuid.uuid4().hex}",
                call.id,
                call.function.name,
                call.function.arguments,
                "completed",
            )
        )
    return items


def _message_item(
    item_id: str, text: str | None, status: str, logprobs: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    content = [] if text is None else [_text_part(text, logprobs)]
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": status,
        "content": content,
    }


def _text_part(text: str, logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def _call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: str
) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


class ResponsesFormatter(ChatFormatter):
    """A Response object, or its stream of events, from the chat machinery's deltas."""

    def __init__(
        self,
        request: ResponsesRequest,
        chat: ChatCompletionRequest,
        completion_id: str,
        model: str,
        new_parser: Callable[[], OutputParser] | None,
        keeper: Keeper | None = None,
    ) -> None:
        super().__init__(chat, completion_id, model, new_parser)
        self.request = request
        self._keeper = keeper
        self._final: dict[str, Any] | None = None
        """The finished response, once built: what ``finish`` stores."""
        self.include_usage = False
        self._sequence = 0
        self._items: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None
        self._finish_reason: str | None = None
        self._num_calls = 0
        self._is_dropping_call = False
        """Past ``max_tool_calls``: the call being streamed is left out."""

    def response(
        self, status: str, output: list[dict[str, Any]], usage: Usage | None
    ) -> dict[str, Any]:
        req = self.request
        incomplete = None
        if status == "incomplete":
            incomplete = {"reason": "max_output_tokens"}
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "model": self.model,
            "status": status,
            "output": output,
            "usage": None if usage is None else usage.as_responses(),
            "instructions": req.instructions,
            "max_output_tokens": req.max_output_tokens,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "tools": [t.model_dump(by_alias=True, exclude_none=True) for t in req.tools or []],
            "tool_choice": (
                req.tool_choice.model_dump()
                if isinstance(req.tool_choice, NamedResponsesTool)
                else req.tool_choice or "auto"
            ),
            "parallel_tool_calls": req.parallel_tool_calls is not False,
            "text": {"format": {"type": "text"}}
            if req.text is None
            else req.text.model_dump(by_alias=True, exclude_none=True),
            "top_logprobs": req.top_logprobs or 0,
            "max_tool_calls": req.max_tool_calls,
            "truncation": "disabled",
            "reasoning": {"effort": None, "summary": None},
            "store": req.store,
            "background": False,
            "previous_response_id": req.previous_response_id,
            "error": None,
            "incomplete_details": incomplete,
            "metadata": {},
        }

    def reply(self, deltas: list[list[ChoiceDelta]], usage: Usage) -> BaseModel:  # type: ignore[override]
        message, finish_reason = self._message(0, deltas[0])
        status = "incomplete" if finish_reason == "length" else "completed"
        logprobs = [
            token.model_dump()
            for d in deltas[0]
            if (lp := chat_logprobs(d)) is not None
            for token in lp.content or []
        ]
        items = _output_items(message, logprobs, self.request.max_tool_calls)
        self._final = self.response(status, items, usage)
        return ResponseObject.model_validate(self._final)

    async def finish(self) -> None:
        if self._keeper is not None and self._final is not None:
            await self._keeper.keep(self._final)

    # --- streamed ---

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        self._sequence += 1
        return {"type": kind, "sequence_number": self._sequence - 1, **fields}

    def preamble(self) -> list[dict[str, Any]]:
        start = self.response("in_progress", [], None)
        return [
            self._event("response.created", response=start),
            self._event("response.in_progress", response=start),
        ]

    def stream_events(self, delta: ChoiceDelta) -> list[dict[str, Any]]:
        choice = self.stream_choice(delta)
        if choice is None:
            return []
        self._finish_reason = delta.finish_reason or self._finish_reason
        out: list[dict[str, Any]] = []
        piece = choice["delta"]
        if piece.get("content"):
            logprobs = (choice.get("logprobs") or {}).get("content") or []
            out += self._text_delta(piece["content"], logprobs)
        for call in piece.get("tool_calls", []):
            out += self._call_delta(call)
        return out

    def _text_delta(self, text: str, logprobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        if self._open is None or self._open["type"] != "message":
            out += self._close_item()
            item_id = f"msg_{uuid.uuid4().hex}"
            self._open = {"type": "message", "id": item_id, "text": "", "logprobs": []}
            index = len(self._items)
            item = _message_item(item_id, None, "in_progress")
            out.append(self._event("response.output_item.added", output_index=index, item=item))
            out.append(
                self._event(
                    "response.content_part.added",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    part=_text_part(""),
                )
            )
        self._open["text"] += text
        self._open["logprobs"] += logprobs
        where = {"item_id": self._open["id"], "output_index": len(self._items), "content_index": 0}
        out.append(
            self._event("response.output_text.delta", delta=text, logprobs=logprobs, **where)
        )
        return out

    def _call_delta(self, call: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        function = call.get("function", {})
        limit = self.request.max_tool_calls
        if call.get("id") is not None:
            self._is_dropping_call = limit is not None and self._num_calls >= limit
            if self._is_dropping_call:
                return []
            self._num_calls += 1
            out += self._close_item()
            item_id = f"fc_{uuid.uuid4().hex}"
            self._open = {
                "type": "function_call",
                "id": item_id,
                "call_id": call["id"],
                "name": function.get("name") or "",
                "arguments": "",
            }
            item = _call_item(item_id, call["id"], self._open["name"], "", "in_progress")
            index = len(self._items)
            out.append(self._event("response.output_item.added", output_index=index, item=item))
        arguments = function.get("arguments")
        if (
            arguments
            and not self._is_dropping_call
            and self._open is not None
            and self._open["type"] == "function_call"
        ):
            self._open["arguments"] += arguments
            out.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=self._open["id"],
                    output_index=len(self._items),
                    delta=arguments,
                )
            )
        return out

    def _close_item(self) -> list[dict[str, Any]]:
        item, self._open = self._open, None
        if item is None:
            return []
        index, out = len(self._items), []
        if item["type"] == "message":
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            out.append(self._event("response.output_text.done", text=item["text"], **where))
            out.append(
                self._event(
                    "response.content_part.done",
                    part=_text_part(item["text"], item["logprobs"]),
                    **where,
                )
            )
            done = _message_item(item["id"], item["text"], "completed", item["logprobs"])
        else:
            out.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    name=item["name"],
                    arguments=item["arguments"],
                )
            )
            done = _call_item(
                item["id"], item["call_id"], item["name"], item["arguments"], "completed"
            )
        out.append(self._event("response.output_item.done", output_index=index, item=done))
        self._items.append(done)
        return out

    def error_events(self, error: APIError) -> list[dict[str, Any]]:
        """A Responses stream ends in error with an ``error`` event, then
        ``response.failed`` carrying the response so far."""
        detail = error.body()["error"]
        failed = self.response("failed", self._items, None)
        failed["error"] = {"code": detail["code"] or "server_error", "message": detail["message"]}
        return [
            self._event(
                "error", code=detail["code"], message=detail["message"], param=detail["param"]
            ),
            self._event("response.failed", response=failed),
        ]

    def closing(self, num_prompt_tokens: int, num_generated_tokens: int) -> list[dict[str, Any]]:
        out = self._close_item()
        status = "incomplete" if self._finish_reason == "length" else "completed"
        usage = Usage.of(num_prompt_tokens, num_generated_tokens)
        final = self._final = self.response(status, self._items, usage)
        kind = "response.incomplete" if status == "incomplete" else "response.completed"
        return [*out, self._event(kind, response=final)]
