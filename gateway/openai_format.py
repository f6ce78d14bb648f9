"""Engine output to OpenAI bodies: streamed chunks, or one collected reply.

Chat and text completions differ only in how one choice is written (a ``delta``
or ``message`` against a ``text``, and their logprobs); ``Formatter`` holds the
rest: the chunk envelope, the usage chunk, and collecting a reply by choice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from engine_worker.contract.api import ChoiceDelta, OutputParser, ParsedOutput, ToolCallDelta
from gateway.errors import APIError, first_error
from gateway.protocol import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionRequest,
    ChatLogprobs,
    ChatTokenLogprob,
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    FunctionCall,
    ToolCall,
    TopLogprob,
    Usage,
)

logger = logging.getLogger("dlfp.gateway")


def chat_logprobs(delta: ChoiceDelta) -> ChatLogprobs | None:
    if delta.logprobs is None:
        return None
    return ChatLogprobs(
        content=[
            ChatTokenLogprob(
                token=lp.token,
                logprob=lp.logprob,
                bytes=list(lp.token.encode()),
                top_logprobs=[
                    TopLogprob(token=t, logprob=v, bytes=list(t.encode())) for t, v in lp.top
                ],
            )
            for lp in delta.logprobs
        ]
    )


def _completion_logprobs(delta: ChoiceDelta, offset: int) -> CompletionLogprobs | None:
    if delta.logprobs is None:
        return None
    offsets, position = [], offset
    for lp in delta.logprobs:
        offsets.append(position)
        position += len(lp.token)
    return CompletionLogprobs(
        tokens=[lp.token for lp in delta.logprobs],
        token_logprobs=[lp.logprob for lp in delta.logprobs],
        top_logprobs=[dict(lp.top) for lp in delta.logprobs],
        text_offset=offsets,
    )


def _finish_reason(deltas: list[ChoiceDelta]) -> str | None:
    reasons = [d.finish_reason for d in deltas if d.finish_reason is not None]
    return reasons[-1] if reasons else None


class Formatter:
    """One completion's OpenAI bodies; subclasses write one choice."""

    chunk_object: str

    def __init__(
        self, body: ChatCompletionRequest | CompletionRequest, completion_id: str, model: str
    ) -> None:
        self.id = completion_id
        self.model = model
        self.created = int(time.time())
        self.n = body.n
        self.stream = body.stream
        self.include_usage = bool(body.stream_options and body.stream_options.include_usage)
        self.return_token_ids = body.return_token_ids

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        envelope = {
            "id": self.id,
            "object": self.chunk_object,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        return envelope | ({"usage": None} if self.include_usage else {}) | extra

    def usage_chunk(self, num_prompt_tokens: int, num_generated_tokens: int) -> dict[str, Any]:
        return self.chunk([], usage=Usage.of(num_prompt_tokens, num_generated_tokens).model_dump())

    def preamble(self) -> list[dict[str, Any]]:
        """Chunks sent before the first token."""
        return []

    async def finish(self) -> None:
        """Once the whole reply is built, before it (or a stream's last events) goes out:
        ``/v1/responses`` stores it here, so the next turn can name it at once."""

    def stream_events(self, delta: ChoiceDelta) -> list[dict[str, Any]]:
        """The events one engine delta makes: here one chunk, or none yet."""
        choice = self.stream_choice(delta)
        return [] if choice is None else [self.chunk([choice])]

    def error_events(self, error: APIError) -> list[dict[str, Any]]:
        """The events that end a stream with ``error``: OpenAI's error body."""
        return [error.body()]

    def closing(self, num_prompt_tokens: int, num_generated_tokens: int) -> list[dict[str, Any]]:
        """Events after the last delta: the usage chunk, if asked for."""
        if not self.include_usage:
            return []
        return [self.usage_chunk(num_prompt_tokens, num_generated_tokens)]

    def stream_choice(self, delta: ChoiceDelta) -> dict[str, Any] | None:
        """One streamed choice; None = nothing to send for this delta yet."""
        choice = self._stream_choice(delta)
        if choice is None:
            return None
        out = choice | {"finish_reason": self._stream_finish_reason(delta)}
        return out | ({"token_ids": delta.token_ids} if self.return_token_ids else {})

    def _stream_choice(self, delta: ChoiceDelta) -> dict[str, Any] | None:
        raise NotImplementedError

    def _stream_finish_reason(self, delta: ChoiceDelta) -> str | None:
        return delta.finish_reason

    @property
    def has_parsers(self) -> bool:
        """Whether the output is read by the engine's parsers (which use its tokenizer)."""
        return False

    def reply(self, deltas: list[list[ChoiceDelta]], usage: Usage) -> BaseModel:
        raise NotImplementedError


def _tool_call_chunk(call: ToolCallDelta) -> dict[str, Any]:
    """A ``delta.tool_calls`` entry as OpenAI's clients accumulate them."""
    out: dict[str, Any] = {"index": call.index}
    if call.id is not None:
        out |= {"id": call.id, "type": "function"}
    function = {
        k: v for k, v in (("name", call.name), ("arguments", call.arguments)) if v is not None
    }
    return out | ({"function": function} if function else {})


class ChatFormatter(Formatter):
    chunk_object = "chat.completion.chunk"

    def __init__(
        self,
        body: ChatCompletionRequest,
        completion_id: str,
        model: str,
        new_parser: Callable[[], OutputParser] | None = None,
    ) -> None:
        super().__init__(body, completion_id, model)
        self._new_parser = new_parser
        self._parsers: dict[int, OutputParser] = {}
        self._called: set[int] = set()
        self._is_named = body.tools is not None and not isinstance(body.tool_choice, str | None)
        self._include_reasoning = body.include_reasoning

    @property
    def has_parsers(self) -> bool:
        return self._new_parser is not None

    def _parser(self, index: int) -> OutputParser | None:
        if self._new_parser is None:
            return None
        if index not in self._parsers:
            self._parsers[index] = self._new_parser()
        return self._parsers[index]

    def preamble(self) -> list[dict[str, Any]]:
        role = {"role": "assistant", "content": ""}
        return [
            self.chunk([{"index": i, "delta": role, "logprobs": None, "finish_reason": None}])
            for i in range(self.n)
        ]

    def _stream_choice(self, delta: ChoiceDelta) -> dict[str, Any] | None:
        lp = chat_logprobs(delta)
        out: dict[str, Any] = {"content": delta.text}
        parser = self._parser(delta.index)
        if parser is not None:
            finished = delta.finish_reason is not None
            parsed = parser.parse_delta(delta.text, delta.token_ids, finished)
            if parsed is None and not finished:
                return None
            out = self._delta(delta.index, parsed or ParsedOutput())
        return {
            "index": delta.index,
            "delta": out,
            "logprobs": None if lp is None else lp.model_dump(),
        }

    def _delta(self, index: int, parsed: ParsedOutput) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if parsed.reasoning and self._include_reasoning:
            out["reasoning"] = parsed.reasoning
        if parsed.content is not None:
            out["content"] = parsed.content
        if parsed.tool_calls:
            self._called.add(index)
            out["tool_calls"] = [_tool_call_chunk(c) for c in parsed.tool_calls]
        return out

    def _stream_finish_reason(self, delta: ChoiceDelta) -> str | None:
        # As vLLM's server: a call the model chose ends with "tool_calls"; a named
        # tool_choice keeps "stop".
        if delta.finish_reason == "stop" and delta.index in self._called and not self._is_named:
            return "tool_calls"
        return delta.finish_reason

    def reply(self, deltas: list[list[ChoiceDelta]], usage: Usage) -> ChatCompletion:
        choices = []
        for index, ds in enumerate(deltas):
            parts = [lp for d in ds if (lp := chat_logprobs(d)) is not None]
            logprobs = (
                ChatLogprobs(content=[t for p in parts for t in p.content or []]) if parts else None
            )
            message, finish_reason = self._message(index, ds)
            choices.append(
                ChatChoice(
                    index=index,
                    message=message,
                    logprobs=logprobs,
                    finish_reason=finish_reason,
                )
            )
        return ChatCompletion(
            id=self.id, created=self.created, model=self.model, choices=choices, usage=usage
        )

    def _message(
        self, index: int, deltas: list[ChoiceDelta]
    ) -> tuple[AssistantMessage, str | None]:
        text = "".join(d.text for d in deltas)
        finish_reason = _finish_reason(deltas)
        parser = self._parser(index)
        if parser is None:
            return AssistantMessage(content=text), finish_reason
        parsed = parser.parse(text, [t for d in deltas for t in d.token_ids])
        try:
            calls = [
                ToolCall(
                    id=c.id or "",
                    function=FunctionCall(name=c.name or "", arguments=c.arguments or ""),
                )
                for c in parsed.tool_calls
            ]
        except ValidationError as exc:
            # NOTE: the parser accepted a call the reply's models refuse (an empty name,
            # or one over 256 characters): the model's text goes back as it is, with the
            # engine's finish reason, rather than a reply that fails validation (a 500).
            logger.warning(
                "tool call refused by the reply model; returned as content",
                extra={"event": "tool_call_refused", "error": first_error(exc.errors()).message},
            )
            return AssistantMessage(content=text), finish_reason
        if calls and not self._is_named and finish_reason in ("stop", None):
            finish_reason = "tool_calls"
        message = AssistantMessage(
            content=parsed.content,
            reasoning=parsed.reasoning if self._include_reasoning else None,
            tool_calls=calls,
        )
        return message, finish_reason


class CompletionFormatter(Formatter):
    chunk_object = "text_completion"

    def __init__(self, body: CompletionRequest, completion_id: str, model: str) -> None:
        super().__init__(body, completion_id, model)
        self._offsets: dict[int, int] = {}

    def _stream_choice(self, delta: ChoiceDelta) -> dict[str, Any] | None:
        offset = self._offsets.get(delta.index, 0)
        self._offsets[delta.index] = offset + len(delta.text)
        lp = _completion_logprobs(delta, offset)
        return {
            "index": delta.index,
            "text": delta.text,
            "logprobs": None if lp is None else lp.model_dump(),
        }

    def reply(self, deltas: list[list[ChoiceDelta]], usage: Usage) -> Completion:
        choices = [
            CompletionChoice(
                index=index,
                text="".join(d.text for d in ds),
                logprobs=self._joined_logprobs(ds),
                finish_reason=_finish_reason(ds),
            )
            for index, ds in enumerate(deltas)
        ]
        return Completion(
            id=self.id, created=self.created, model=self.model, choices=choices, usage=usage
        )

    @staticmethod
    def _joined_logprobs(deltas: list[ChoiceDelta]) -> CompletionLogprobs | None:
        offset, parts = 0, []
        for d in deltas:
            if (lp := _completion_logprobs(d, offset)) is not None:
                parts.append(lp)
            offset += len(d.text)
        if not parts:
            return None
        return CompletionLogprobs(
            tokens=[t for p in parts for t in p.tokens],
            token_logprobs=[t for p in parts for t in p.token_logprobs],
            top_logprobs=[t for p in parts for t in p.top_logprobs],
            text_offset=[t for p in parts for t in p.text_offset],
        )
