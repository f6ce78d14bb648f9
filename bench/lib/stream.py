"""Reading OpenAI streaming chunks and error bodies, and the exact token accounting of a
finished stream.

A *content chunk* is one that carries generated tokens. Where the endpoint says
how many (vLLM's ``token_ids`` with ``return_token_ids``, or logprobs entries),
that number is used; otherwise a chunk with text counts as one token event.
A chat stream's first chunk (``role: assistant``, empty content) carries none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bench.lib.records import RequestRecord


@dataclass(frozen=True)
class StreamEvent:
    """One parsed ``data:`` line of a stream (``[DONE]`` is not an event)."""

    is_content: bool
    text: str = ""
    num_tokens: int | None = None
    token_ids: list[int] | None = None
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    error: str | None = None
    response_id: str | None = None


def _num_logprobs(choice: dict[str, Any], chat: bool) -> int | None:
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        return None
    entries = logprobs.get("content") if chat else logprobs.get("tokens")
    return len(entries) if isinstance(entries, list) else None


def _choice_event(choice: dict[str, Any], chat: bool) -> StreamEvent:
    finish = choice.get("finish_reason")
    token_ids = choice.get("token_ids")
    token_ids = [int(t) for t in token_ids] if isinstance(token_ids, list) else None
    num_tokens = len(token_ids) if token_ids is not None else _num_logprobs(choice, chat)
    if chat:
        delta = choice.get("delta") or {}
        content = delta.get("content")
        text = content if isinstance(content, str) else ""
        # A token may decode to no text yet (half a UTF-8 character): a chunk
        # without the role and with a content field is still a token event.
        guess = bool(text) or ("role" not in delta and content is not None and finish is None)
    else:
        text = choice.get("text") or ""
        guess = bool(text) or finish is None
    is_content = num_tokens > 0 if num_tokens is not None else guess
    return StreamEvent(is_content, text, num_tokens, token_ids, finish)


def parse_data(data: str, chat: bool) -> StreamEvent | None:
    """One SSE ``data:`` payload; None for ``[DONE]``."""
    if data.strip() == "[DONE]":
        return None
    obj = json.loads(data)
    if not isinstance(obj, dict):
        return StreamEvent(False, error=f"unexpected chunk: {data[:200]}")
    if obj.get("error") is not None:
        error = obj["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        return StreamEvent(False, error=f"error event: {message}")
    usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else None
    choices = obj.get("choices") or []
    if not choices:
        return StreamEvent(False, usage=usage, response_id=obj.get("id"))
    event = _choice_event(choices[0], chat)
    return StreamEvent(
        event.is_content,
        event.text,
        event.num_tokens,
        event.token_ids,
        event.finish_reason,
        usage,
        None,
        obj.get("id"),
    )


def apply_event(record: RequestRecord, event: StreamEvent, t_s: float) -> None:
    """Fold one event into the request's record, stamped with its arrival time."""
    if event.error is not None:
        record.fail(event.error)
        return
    if event.response_id and record.response_id is None:
        record.response_id = event.response_id
    if event.is_content:
        record.chunk_s.append(t_s)
        record.chunk_num_tokens.append(event.num_tokens)
    record.text += event.text
    if event.token_ids is not None:
        record.token_ids = (record.token_ids or []) + event.token_ids
    if event.finish_reason is not None:
        record.finish_reason = event.finish_reason
    if event.usage is not None:
        record.usage = event.usage
        record.usage_s = t_s
        prompt_tokens = event.usage.get("prompt_tokens")
        record.num_prompt_tokens = int(prompt_tokens) if prompt_tokens is not None else None


def accounting_error(record: RequestRecord, expected: int) -> str | None:
    """Why the stream did not deliver exactly ``expected`` tokens, or None if it did."""
    if record.usage is None:
        return "the stream ended without a usage chunk"
    reported = record.usage.get("completion_tokens")
    if reported != expected:
        return f"usage reports {reported} completion tokens, expected {expected}"
    counts = record.chunk_num_tokens
    if counts and all(n is not None for n in counts):
        delivered = sum(n for n in counts if n is not None)
        if delivered != expected:
            return f"the stream delivered {delivered} tokens, usage says {expected}"
    elif len(counts) > expected:
        return f"the stream delivered {len(counts)} content chunks for {expected} tokens"
    if not counts:
        return "the stream delivered no content chunk"
    return None


def error_of(content: bytes) -> dict[str, Any]:
    """The OpenAI error object of a body, or {} for any other body."""
    try:
        error = json.loads(content).get("error")
    except (ValueError, AttributeError):
        return {}
    return error if isinstance(error, dict) else {}
