"""Engine output to OpenAI bodies: streamed chunks, or one collected reply.

Chat and text completions differ only in how one choice is written (a ``delta``
or ``message`` against a ``text``, and their logprobs); ``Formatter`` holds the
rest: the chunk envelope, the usage chunk, and collecting a reply by choice.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel

from engine_worker.api import ChoiceDelta
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
    TopLogprob,
    Usage,
)


def usage(num_prompt_tokens: int, num_generated_tokens: int) -> Usage:
    return Usage(
        prompt_tokens=num_prompt_tokens,
        completion_tokens=num_generated_tokens,
        total_tokens=num_prompt_tokens + num_generated_tokens,
    )


def _chat_logprobs(delta: ChoiceDelta) -> ChatLogprobs | None:
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
        return self.chunk([], usage=usage(num_prompt_tokens, num_generated_tokens).model_dump())

    def preamble(self) -> list[dict[str, Any]]:
        """Chunks sent before the first token."""
        return []

    def stream_choice(self, delta: ChoiceDelta) -> dict[str, Any]:
        out = self._stream_choice(delta) | {"finish_reason": delta.finish_reason}
        return out | ({"token_ids": delta.token_ids} if self.return_token_ids else {})

    def _stream_choice(self, delta: ChoiceDelta) -> dict[str, Any]:
        raise NotImplementedError

    def reply(self, deltas: list[list[ChoiceDelta]], usage: Usage) -> BaseModel:
        raise NotImplementedError


class ChatFormatter(Formatter):
    chunk_object = "chat.completion.chunk"

    def preamble(self) -> list[dict[str, Any]]:
        role = {"role": "assistant", "content": ""}
        return [
            self.chunk([{"index": i, "delta": role, "logprobs": None, "finish_reason": None}])
            for i in range(self.n)
        ]

    def _stream_choice(self, delta: ChoiceDelta) -> dict[str, Any]:
        lp = _chat_logprobs(delta)
        return {
            "index": delta.index,
            "delta": {"content": delta.text},
            "logprobs": None if lp is None else lp.model_dump(),
        }

    def reply(self, deltas: list[list[ChoiceDelta]], usage: Usage) -> ChatCompletion:
        choices = []
        for index, ds in enumerate(deltas):
            parts = [lp for d in ds if (lp := _chat_logprobs(d)) is not None]
            logprobs = (
                ChatLogprobs(content=[t for p in parts for t in p.content or []]) if parts else None
            )
            message = AssistantMessage(content="".join(d.text for d in ds))
            choices.append(
                ChatChoice(
                    index=index,
                    message=message,
                    logprobs=logprobs,
                    finish_reason=_finish_reason(ds),
                )
            )
        return ChatCompletion(
            id=self.id, created=self.created, model=self.model, choices=choices, usage=usage
        )


class CompletionFormatter(Formatter):
    chunk_object = "text_completion"

    def __init__(self, body: CompletionRequest, completion_id: str, model: str) -> None:
        super().__init__(body, completion_id, model)
        self._offsets: dict[int, int] = {}

    def _stream_choice(self, delta: ChoiceDelta) -> dict[str, Any]:
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
