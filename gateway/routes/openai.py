"""``/v1/chat/completions``, ``/v1/completions`` and ``/v1/models``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from engine_worker.api import ChoiceDelta
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
from gateway.openai_stream import collect, finish_reason, joined_text, stream_events
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
from gateway.sse import sse_response

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
    model = engine.info.model_name
    if not body.stream:
        return _chat_reply(generation, rid, model, await collect(generation))

    def choice(d: ChoiceDelta) -> dict[str, Any]:
        lp = chat_logprobs(d)
        out = {
            "index": d.index,
            "delta": {"content": d.text},
            "logprobs": None if lp is None else lp.model_dump(),
            "finish_reason": d.finish_reason,
        }
        return out | ({"token_ids": d.token_ids} if body.return_token_ids else {})

    base = {"id": rid, "object": "chat.completion.chunk", "created": now_s(), "model": model}
    preamble = [
        {
            "index": i,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
        for i in range(body.n)
    ]
    events = stream_events(generation, base, choice, _include_usage(body), preamble)
    return sse_response(events, gateway.response_headers(request), gateway.keepalive_s)


def _chat_reply(
    generation: Generation, rid: str, model: str, deltas: list[list[ChoiceDelta]]
) -> ChatCompletion:
    choices = []
    for index, ds in enumerate(deltas):
        parts = [lp for d in ds if (lp := chat_logprobs(d)) is not None]
        logprobs = (
            ChatLogprobs(content=[t for p in parts for t in p.content or []]) if parts else None
        )
        message = AssistantMessage(content=joined_text(ds))
        choices.append(
            ChatChoice(
                index=index, message=message, logprobs=logprobs, finish_reason=finish_reason(ds)
            )
        )
    return ChatCompletion(
        id=rid, created=now_s(), model=model, choices=choices, usage=usage(generation.stats)
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
    model = engine.info.model_name
    if not body.stream:
        return _completion_reply(generation, rid, model, await collect(generation))
    offsets: dict[int, int] = {}

    def choice(d: ChoiceDelta) -> dict[str, Any]:
        lp = completion_logprobs(d, offsets.get(d.index, 0))
        offsets[d.index] = offsets.get(d.index, 0) + len(d.text)
        out = {
            "index": d.index,
            "text": d.text,
            "logprobs": None if lp is None else lp.model_dump(),
            "finish_reason": d.finish_reason,
        }
        return out | ({"token_ids": d.token_ids} if body.return_token_ids else {})

    base = {"id": rid, "object": "text_completion", "created": now_s(), "model": model}
    events = stream_events(generation, base, choice, _include_usage(body))
    return sse_response(events, gateway.response_headers(request), gateway.keepalive_s)


def _completion_reply(
    generation: Generation, rid: str, model: str, deltas: list[list[ChoiceDelta]]
) -> Completion:
    choices = []
    for index, ds in enumerate(deltas):
        offset, parts = 0, []
        for d in ds:
            if (lp := completion_logprobs(d, offset)) is not None:
                parts.append(lp)
            offset += len(d.text)
        logprobs = (
            CompletionLogprobs(
                tokens=[t for p in parts for t in p.tokens],
                token_logprobs=[t for p in parts for t in p.token_logprobs],
                top_logprobs=[t for p in parts for t in p.top_logprobs],
                text_offset=[t for p in parts for t in p.text_offset],
            )
            if parts
            else None
        )
        choices.append(
            CompletionChoice(
                index=index,
                text=joined_text(ds),
                logprobs=logprobs,
                finish_reason=finish_reason(ds),
            )
        )
    return Completion(
        id=rid, created=now_s(), model=model, choices=choices, usage=usage(generation.stats)
    )


def _include_usage(body: ChatCompletionRequest | CompletionRequest) -> bool:
    return bool(body.stream_options and body.stream_options.include_usage)
