"""Engine output to OpenAI bodies: SSE chunk events, or one collected reply.

Chat and text completions differ only in how one choice's delta is written;
the stream's framing (role preamble, usage chunk, ``[DONE]``, error event)
and the collection of a non-streamed reply are shared here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from engine_worker.api import ChoiceDelta, EngineDeadError
from gateway.errors import APIError
from gateway.generation import Generation
from gateway.openai_format import usage
from gateway.sse import DONE, event

FormatChoice = Callable[[ChoiceDelta], dict[str, Any]]


async def stream_events(
    generation: Generation,
    base: dict[str, Any],
    format_choice: FormatChoice,
    include_usage: bool,
    preamble: list[dict[str, Any]] | None = None,
) -> AsyncIterator[bytes]:
    """One event per engine delta that carries tokens or a finish reason."""
    if include_usage:
        base = base | {"usage": None}
    for choice in preamble or []:
        yield event(base | {"choices": [choice]})
    try:
        async for chunk in generation.chunks():
            for delta in chunk.choices:
                if delta.token_ids or delta.finish_reason is not None:
                    yield event(base | {"choices": [format_choice(delta)]})
    except EngineDeadError as exc:
        error = APIError(503, f"the engine failed during the stream: {exc}", code="engine_error")
        yield event(error.body())
        return
    if include_usage:
        yield event(base | {"choices": [], "usage": usage(generation.stats).model_dump()})
    yield DONE


async def collect(generation: Generation) -> list[list[ChoiceDelta]]:
    """Every delta of every choice, in order, for a non-streamed reply."""
    by_choice: list[list[ChoiceDelta]] = [[] for _ in range(generation.request.options.n)]
    try:
        async for chunk in generation.chunks():
            for delta in chunk.choices:
                by_choice[delta.index].append(delta)
    except EngineDeadError as exc:
        raise APIError(503, f"the engine failed: {exc}", code="engine_error") from exc
    return by_choice


def joined_text(deltas: list[ChoiceDelta]) -> str:
    return "".join(d.text for d in deltas)


def finish_reason(deltas: list[ChoiceDelta]) -> str | None:
    reasons = [d.finish_reason for d in deltas if d.finish_reason is not None]
    return reasons[-1] if reasons else None
