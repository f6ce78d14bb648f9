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

from gateway.deps import AuthorizedV1, EngineDep, LifecycleDep, OwnerDep, ResponseStoreDep
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
from gateway.sse import DONE
from gateway.sse import event as sse_event
from gateway.stored_responses import Keeper, replay_events, resolve, stored_or_404

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
async def responses(
    body: ResponsesRequest, lifecycle: LifecycleDep, store: ResponseStoreDep, owner: OwnerDep
) -> Response | BaseModel:
    """``previous_response_id`` and ``item_reference`` are read from the store first;
    with ``store`` (the default) the finished response is kept there."""
    conversation = await resolve(body, store, owner)
    keeper = Keeper(store, owner, conversation) if body.store else None
    return await lifecycle.run(ResponsesInput(body, conversation, keeper))


@router.get(
    "/v1/responses/{response_id}",
    response_model=None,
    responses={**_ERRORS, 200: {"content": _STREAM}},
)
async def get_response(
    response_id: str,
    store: ResponseStoreDep,
    owner: OwnerDep,
    stream: bool = False,
    starting_after: int | None = None,
) -> Response | dict[str, Any]:
    """A stored response; with ``stream=true`` its events again, after ``starting_after``."""
    stored = await stored_or_404(store, owner, response_id)
    if not stream:
        return stored.response
    after = -1 if starting_after is None else starting_after
    events = [e for e in replay_events(stored.response) if e["sequence_number"] > after]
    body = b"".join(sse_event(e) for e in events) + DONE
    return Response(body, media_type="text/event-stream")


@router.delete("/v1/responses/{response_id}", responses=_ERRORS)
async def delete_response(
    response_id: str, store: ResponseStoreDep, owner: OwnerDep
) -> dict[str, Any]:
    if not await store.delete(owner, response_id):
        await stored_or_404(store, owner, response_id)  # the 404 of an unknown id
    return {"id": response_id, "object": "response", "deleted": True}
