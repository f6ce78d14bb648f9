"""OpenAI requests in, engine options out; engine chunks in, OpenAI chunks out."""

from __future__ import annotations

import time
from typing import Any

from engine_worker.api import ChoiceDelta, Engine, SamplingOptions
from gateway.errors import APIError
from gateway.generation import PreparedRequest, StreamStats
from gateway.protocol import (
    ChatCompletionRequest,
    ChatLogprobs,
    ChatTokenLogprob,
    CompletionLogprobs,
    CompletionRequest,
    ResponseFormat,
    TopLogprob,
    Usage,
)


def _response_format(fmt: ResponseFormat | None) -> dict[str, Any]:
    if fmt is None or fmt.type == "text":
        return {}
    if fmt.type == "json_object":
        return {"json_object": True}
    assert fmt.json_schema is not None  # guaranteed by ResponseFormat's validator
    return {"json_schema": fmt.json_schema.schema_}


def _max_tokens(requested: int | None, num_prompt: int, max_model_len: int, limit: int) -> int:
    if num_prompt == 0:
        raise APIError(400, "the prompt is empty", param="prompt")
    room = max_model_len - num_prompt
    if room <= 0:
        raise APIError(
            400,
            f"the prompt is {num_prompt} tokens, longer than this model's context of "
            f"{max_model_len} tokens",
            param="messages",
            code="context_length_exceeded",
        )
    if requested is None:
        return min(room, limit)
    if requested > limit:
        raise APIError(
            400, f"max_tokens={requested} exceeds the limit of {limit}", param="max_tokens"
        )
    if requested > room:
        raise APIError(
            400,
            f"this model's context is {max_model_len} tokens; the prompt takes {num_prompt} "
            f"and max_tokens asks for {requested} more",
            param="max_tokens",
            code="context_length_exceeded",
        )
    return requested


def _check_model(name: str, engine: Engine) -> None:
    if name != engine.info.model_name:
        raise APIError(
            404,
            f"the model '{name}' does not exist; this gateway serves '{engine.info.model_name}'",
            param="model",
            code="model_not_found",
        )


def _stop(body: ChatCompletionRequest | CompletionRequest) -> tuple[str, ...]:
    try:
        return body.stop_list()
    except ValueError as exc:
        raise APIError(400, str(exc), param="stop") from exc


def _options(
    body: ChatCompletionRequest | CompletionRequest, max_tokens: int, logprobs: int | None
) -> SamplingOptions:
    return SamplingOptions(
        max_tokens=max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        seed=body.seed,
        stop=_stop(body),
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
        n=body.n,
        logprobs=logprobs,
        ignore_eos=body.ignore_eos,
        **_response_format(body.response_format),
    )


def prepare_chat(
    body: ChatCompletionRequest, engine: Engine, request_id: str, max_tokens_limit: int
) -> PreparedRequest:
    _check_model(body.model, engine)
    messages = [{"role": m.role, "content": m.text()} for m in body.messages]
    try:
        prompt_ids = engine.render_chat(messages)
    except (ValueError, TypeError, KeyError) as exc:  # template rejected the conversation
        raise APIError(400, f"cannot render the conversation: {exc}", param="messages") from exc
    max_tokens = _max_tokens(
        body.requested_max_tokens(), len(prompt_ids), engine.info.max_model_len, max_tokens_limit
    )
    logprobs = (body.top_logprobs or 0) if body.logprobs else None
    if body.top_logprobs is not None and not body.logprobs:
        raise APIError(400, "top_logprobs requires logprobs=true", param="top_logprobs")
    options = _options(body, max_tokens, logprobs)
    return PreparedRequest(request_id, "chat", prompt_ids, options, body.priority, body.cache_salt)


def prepare_completion(
    body: CompletionRequest, engine: Engine, request_id: str, max_tokens_limit: int
) -> PreparedRequest:
    _check_model(body.model, engine)
    if body.echo:
        raise APIError(400, "echo is not supported", param="echo")
    prompt = body.prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        if len(prompt) != 1:
            raise APIError(400, "batched prompts are not supported; send one", param="prompt")
        prompt = prompt[0]
    if isinstance(prompt, str):
        prompt_ids = engine.tokenize(prompt)
    else:
        prompt_ids = [int(t) for t in prompt]
        if any(t < 0 for t in prompt_ids):
            raise APIError(400, "token ids must be non-negative", param="prompt")
    max_tokens = _max_tokens(
        body.max_tokens if body.max_tokens is not None else 16,
        len(prompt_ids),
        engine.info.max_model_len,
        max_tokens_limit,
    )
    options = _options(body, max_tokens, body.logprobs)
    return PreparedRequest(
        request_id, "completions", prompt_ids, options, body.priority, body.cache_salt
    )


def usage(stats: StreamStats) -> Usage:
    """The OpenAI usage block of a finished generation."""
    return Usage(
        prompt_tokens=stats.num_prompt_tokens,
        completion_tokens=stats.total_generated,
        total_tokens=stats.num_prompt_tokens + stats.total_generated,
    )


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


def completion_logprobs(delta: ChoiceDelta, offset: int) -> CompletionLogprobs | None:
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


def now_s() -> int:
    return int(time.time())
