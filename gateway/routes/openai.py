"""``/v1/chat/completions``, ``/v1/completions`` and ``/v1/models``.

The handlers only name their input: ``deps.LifecycleDep`` owns the request's life.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import BaseModel

from gateway.deps import AuthorizedV1, EngineDep, LifecycleDep
from gateway.errors import ErrorResponse
from gateway.openai_request import ChatInput, CompletionInput
from gateway.protocol import (
    ChatCompletion,
    ChatCompletionRequest,
    Completion,
    CompletionRequest,
    ModelCard,
    ModelList,
    ModelPermission,
    ResponsesRequest,
)
from gateway.responses import ResponsesInput

router = APIRouter(dependencies=[AuthorizedV1])

_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse} for status in (400, 401, 403, 404, 413, 429, 503)
}
_STREAM = {"text/event-stream": {"schema": {"type": "string"}}}


@router.get("/v1/models", response_model=ModelList, responses=_ERRORS)
async def list_models(engine: EngineDep) -> ModelList:
    info, created = engine.info, int(time.time())
    card = ModelCard(
        id=info.model_name,
        created=created,
        root=info.root or info.model_name,
        max_model_len=info.max_model_len,
        permission=[ModelPermission(id=f"modelperm-{uuid.uuid4().hex}", created=created)],
    )
    return ModelList(data=[card])


@router.post(
    "/v1/chat/completions",
    response_model=ChatCompletion,
    responses={**_ERRORS, 200: {"content": _STREAM}},
)
async def chat_completions(
    body: ChatCompletionRequest, lifecycle: LifecycleDep
) -> Response | BaseModel:
    return await lifecycle.run(ChatInput(body))


@router.post(
    "/v1/completions", response_model=Completion, responses={**_ERRORS, 200: {"content": _STREAM}}
)
async def completions(body: CompletionRequest, lifecycle: LifecycleDep) -> Response | BaseModel:
    return await lifecycle.run(CompletionInput(body))


@router.post("/v1/responses", response_model=None, responses={**_ERRORS, 200: {"content": _STREAM}})
async def responses(body: ResponsesRequest, lifecycle: LifecycleDep) -> Response | BaseModel:
    """Stateless: ``store`` is accepted and nothing is stored."""
    return await lifecycle.run(ResponsesInput(body))
