"""``/v1/chat/completions``, ``/v1/completions`` and ``/v1/models``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from engine_worker.api import EngineDeadError
from gateway.deps import AuthorizedV1, EngineDep, GatewayDep
from gateway.errors import APIError, ErrorResponse
from gateway.generation import Generation, PreparedRequest
from gateway.openai_format import (
    chat_logprobs,
    completion_logprobs,
    now_s,
    prepare_chat,
    prepare_completion,
    usage,
)
from gateway.protocol import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionRequest,
    ChatLogprobs,
    Completion,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    ModelCard,
    ModelList,
)
from gateway.sse import DONE, event, sse_response

router = APIRouter(dependencies=[AuthorizedV1])

_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse} for status in (400, 401, 404, 413, 429, 503)
}
_STREAM = {"text/event-stream": {"schema": {"type": "string"}}}


@router.get("/v1/models", response_model=ModelList, responses=_ERRORS)
async def list_models(engine: EngineDep) -> ModelList:
    card = ModelCard(
        id=engine.info.model_name, created=now_s(), max_model_len=engine.info.max_model_len
    )
    return ModelList(data=[card])


def _priority(body_priority: int, request: Request) -> int:
    """The header X-Priority, else the body's ``priority``; lower is served first."""
    header = request.headers.get("x-priority")
    if header is None:
        return body_priority
    try:
        value = int(header)
    except ValueError:
        raise APIError(400, "X-Priority must be an integer", param="X-Priority") from None
    if not -1000 <= value <= 1000:
        raise APIError(400, "X-Priority must lie within [-1000, 1000]", param="X-Priority")
    return value


async def _start(gateway: GatewayDep, request: Request, prepared: PreparedRequest) -> Generation:
    prepared.priority = _priority(prepared.priority, request)
    generation = await gateway.start_generation(prepared, request)
    request.state.generation = generation
    return generation


def _error_event(exc: Exception) -> bytes:
    body = APIError(503, f"the engine failed during the stream: {exc}", code="engine_error").body()
    return event(body)


@router.post(
    "/v1/chat/completions",
    response_model=ChatCompletion,
    responses={**_ERRORS, 200: {"content": _STREAM}},
)
async def chat_completions(
    body: ChatCompletionRequest, request: Request, gateway: GatewayDep, engine: EngineDep
) -> Response | ChatCompletion:
    rid = f"chatcmpl-{request.state.request_id}"
    prepared = prepare_chat(body, engine, rid, gateway.settings.max_tokens_limit)
    generation = await _start(gateway, request, prepared)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        events = _chat_events(
            generation, rid, engine.info.model_name, include_usage, body.return_token_ids
        )
        return sse_response(events, gateway.response_headers(request), gateway.keepalive_s)
    return await _chat_result(generation, rid, engine.info.model_name)


async def _chat_events(
    generation: Generation, rid: str, model: str, include_usage: bool, with_ids: bool = False
) -> AsyncIterator[bytes]:
    base: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": now_s(),
        "model": model,
    }
    if include_usage:
        base["usage"] = None
    for index in range(generation.request.options.n):
        delta = {"role": "assistant", "content": ""}
        yield event(
            base
            | {
                "choices": [
                    {"index": index, "delta": delta, "logprobs": None, "finish_reason": None}
                ]
            }
        )
    try:
        async for chunk in generation.chunks():
            for c in chunk.choices:
                if not c.token_ids and c.finish_reason is None:
                    continue
                logprobs = chat_logprobs(c)
                choice = {
                    "index": c.index,
                    "delta": {"content": c.text},
                    "logprobs": None if logprobs is None else logprobs.model_dump(),
                    "finish_reason": c.finish_reason,
                }
                if with_ids:
                    choice["token_ids"] = c.token_ids
                yield event(base | {"choices": [choice]})
    except EngineDeadError as exc:
        yield _error_event(exc)
        return
    if include_usage:
        stats = generation.stats
        yield event(
            base
            | {
                "choices": [],
                "usage": usage(stats.num_prompt_tokens, stats.total_generated).model_dump(),
            }
        )
    yield DONE


async def _chat_result(generation: Generation, rid: str, model: str) -> ChatCompletion:
    n = generation.request.options.n
    texts, finish = [""] * n, [None] * n  # type: list[str], list[str | None]
    logprobs: list[ChatLogprobs | None] = [None] * n
    try:
        async for chunk in generation.chunks():
            for c in chunk.choices:
                texts[c.index] += c.text
                finish[c.index] = c.finish_reason or finish[c.index]
                lp = chat_logprobs(c)
                if lp is not None:
                    old = logprobs[c.index]
                    logprobs[c.index] = (
                        lp
                        if old is None
                        else ChatLogprobs(content=(old.content or []) + (lp.content or []))
                    )
    except EngineDeadError as exc:
        raise APIError(503, f"the engine failed: {exc}", code="engine_error") from exc
    choices = [
        ChatChoice(
            index=i,
            message=AssistantMessage(content=texts[i]),
            logprobs=logprobs[i],
            finish_reason=finish[i],
        )
        for i in range(n)
    ]
    stats = generation.stats
    return ChatCompletion(
        id=rid,
        created=now_s(),
        model=model,
        choices=choices,
        usage=usage(stats.num_prompt_tokens, stats.total_generated),
    )


@router.post(
    "/v1/completions", response_model=Completion, responses={**_ERRORS, 200: {"content": _STREAM}}
)
async def completions(
    body: CompletionRequest, request: Request, gateway: GatewayDep, engine: EngineDep
) -> Response | Completion:
    rid = f"cmpl-{request.state.request_id}"
    prepared = prepare_completion(body, engine, rid, gateway.settings.max_tokens_limit)
    generation = await _start(gateway, request, prepared)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        events = _completion_events(
            generation, rid, engine.info.model_name, include_usage, body.return_token_ids
        )
        return sse_response(events, gateway.response_headers(request), gateway.keepalive_s)
    return await _completion_result(generation, rid, engine.info.model_name)


async def _completion_events(
    generation: Generation, rid: str, model: str, include_usage: bool, with_ids: bool = False
) -> AsyncIterator[bytes]:
    base: dict[str, Any] = {
        "id": rid,
        "object": "text_completion",
        "created": now_s(),
        "model": model,
    }
    if include_usage:
        base["usage"] = None
    offsets: dict[int, int] = {}
    try:
        async for chunk in generation.chunks():
            for c in chunk.choices:
                if not c.token_ids and c.finish_reason is None:
                    continue
                lp = completion_logprobs(c, offsets.get(c.index, 0))
                offsets[c.index] = offsets.get(c.index, 0) + len(c.text)
                choice = {
                    "index": c.index,
                    "text": c.text,
                    "logprobs": None if lp is None else lp.model_dump(),
                    "finish_reason": c.finish_reason,
                }
                if with_ids:
                    choice["token_ids"] = c.token_ids
                yield event(base | {"choices": [choice]})
    except EngineDeadError as exc:
        yield _error_event(exc)
        return
    if include_usage:
        stats = generation.stats
        yield event(
            base
            | {
                "choices": [],
                "usage": usage(stats.num_prompt_tokens, stats.total_generated).model_dump(),
            }
        )
    yield DONE


async def _completion_result(generation: Generation, rid: str, model: str) -> Completion:
    n = generation.request.options.n
    texts, finish = [""] * n, [None] * n  # type: list[str], list[str | None]
    logprobs: list[CompletionLogprobs | None] = [None] * n
    try:
        async for chunk in generation.chunks():
            for c in chunk.choices:
                lp = completion_logprobs(c, len(texts[c.index]))
                texts[c.index] += c.text
                finish[c.index] = c.finish_reason or finish[c.index]
                if lp is not None:
                    old = logprobs[c.index]
                    logprobs[c.index] = (
                        lp
                        if old is None
                        else CompletionLogprobs(
                            tokens=old.tokens + lp.tokens,
                            token_logprobs=old.token_logprobs + lp.token_logprobs,
                            top_logprobs=old.top_logprobs + lp.top_logprobs,
                            text_offset=old.text_offset + lp.text_offset,
                        )
                    )
    except EngineDeadError as exc:
        raise APIError(503, f"the engine failed: {exc}", code="engine_error") from exc
    choices = [
        CompletionChoice(index=i, text=texts[i], logprobs=logprobs[i], finish_reason=finish[i])
        for i in range(n)
    ]
    stats = generation.stats
    return Completion(
        id=rid,
        created=now_s(),
        model=model,
        choices=choices,
        usage=usage(stats.num_prompt_tokens, stats.total_generated),
    )
