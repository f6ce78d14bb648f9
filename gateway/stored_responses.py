"""Stored responses as the Responses API uses them: ``previous_response_id`` and
``item_reference`` resolved against the store before a request is served, the finished
response kept after it, and a stored response read back or replayed as its events.

Where entries live is ``response_store`` (memory) or ``redis_store``; this module is
what the routes and the Responses formatter call.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from starlette.requests import HTTPConnection

from gateway.auth import bearer_token, key_digest
from gateway.errors import APIError
from gateway.protocol import ResponsesRequest
from gateway.response_store import (
    EntryTooLargeError,
    MemoryStore,
    ResponseStore,
    StoreBounds,
    StoredResponse,
    StoreUnavailableError,
)
from gateway.settings import Settings

logger = logging.getLogger("dlfp.gateway")

OPEN_OWNER = "open"
"""Every caller's owner when no API key is configured: they share one store."""


def build_store(settings: Settings) -> ResponseStore:
    bounds = StoreBounds(
        max_entries=settings.response_store_max_entries,
        max_bytes=settings.response_store_max_bytes,
        ttl_s=settings.response_store_ttl_s,
    )
    if settings.response_store == "redis" and settings.redis_url is not None:
        from gateway.redis_store import RedisStore

        return RedisStore(settings.redis_url.get_secret_value(), bounds)
    return MemoryStore(bounds)


def owner_of(request: HTTPConnection, settings: Settings) -> str:
    """Whose the stored responses are: the API key's digest (never the key itself, which
    would then sit in Redis), or ``OPEN_OWNER`` with no keys configured."""
    token = bearer_token(request)
    if not settings.api_key_set() or token is None:
        return OPEN_OWNER
    return key_digest(token)


@dataclass(frozen=True)
class Conversation:
    """A request's input with what it refers to resolved: the stored conversation before
    it (``previous_response_id``), then its own items, each ``item_reference`` replaced
    by the item it names."""

    history: list[dict[str, Any]]
    items: list[dict[str, Any]]

    @property
    def all_items(self) -> list[dict[str, Any]]:
        return [*self.history, *self.items]


async def resolve(body: ResponsesRequest, store: ResponseStore, owner: str) -> Conversation:
    """400 naming the field and the id for a response or item not stored under ``owner``
    (unknown, deleted, expired or evicted); ``StoreUnavailableError`` if the store is."""
    history: list[dict[str, Any]] = []
    if body.previous_response_id is not None:
        previous = await store.get(owner, body.previous_response_id)
        if previous is None:
            raise APIError(
                400,
                f"previous response {body.previous_response_id!r} is not stored: unknown, "
                "deleted, expired or evicted, or made with another API key",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        history = [*previous.input_items, *previous.response.get("output", [])]
    given = body.input
    items: list[dict[str, Any]] = (
        [{"type": "message", "role": "user", "content": given}]
        if isinstance(given, str)
        else list(given)
    )
    for i, item in enumerate(items):
        if item.get("type") == "item_reference":
            item_id = str(item.get("id"))
            found = await store.item(owner, item_id)
            if found is None:
                raise APIError(
                    400,
                    f"item {item_id!r} is not stored: unknown, or its response deleted, "
                    "expired or evicted, or made with another API key",
                    param=f"input.{i}",
                    code="item_not_found",
                )
            items[i] = found
    return Conversation(history=history, items=items)


class Keeper:
    """Stores a finished response under its owner; a store that fails is logged, and the
    client keeps its answer (the next turn that names it gets the 400 for an unknown id)."""

    def __init__(self, store: ResponseStore, owner: str, conversation: Conversation) -> None:
        self._store = store
        self._owner = owner
        self._conversation = conversation

    async def keep(self, response: dict[str, Any]) -> None:
        stored = StoredResponse(response=response, input_items=self._conversation.all_items)
        try:
            await self._store.put(self._owner, stored)
        except (StoreUnavailableError, EntryTooLargeError) as exc:
            fields = {"response_id": stored.id, "error": str(exc)}
            logger.warning(
                "response not stored", extra={"event": "response_store_failed", **fields}
            )


async def stored_or_404(store: ResponseStore, owner: str, response_id: str) -> StoredResponse:
    stored = await store.get(owner, response_id)
    if stored is None:
        raise APIError(
            404,
            f"no stored response {response_id!r}",
            param="response_id",
            code="response_not_found",
        )
    return stored


def replay_events(response: dict[str, Any]) -> list[dict[str, Any]]:
    """A stored response's stream, as it was sent: created, in progress, each output
    item with its whole text or arguments as one delta, then the final event."""
    events: list[dict[str, Any]] = []

    def add(kind: str, **fields: Any) -> None:
        events.append({"type": kind, "sequence_number": len(events), **fields})

    start = response | {"status": "in_progress", "output": [], "usage": None}
    add("response.created", response=start)
    add("response.in_progress", response=start)
    for index, item in enumerate(response.get("output", [])):
        add("response.output_item.added", output_index=index, item=_in_progress(item))
        where = {"item_id": item.get("id"), "output_index": index}
        if item.get("type") == "message":
            for j, part in enumerate(item.get("content", [])):
                at = where | {"content_index": j}
                add("response.content_part.added", part=part | {"text": ""}, **at)
                text, logprobs = part.get("text", ""), part.get("logprobs", [])
                add("response.output_text.delta", delta=text, logprobs=logprobs, **at)
                add("response.output_text.done", text=text, **at)
                add("response.content_part.done", part=part, **at)
        elif item.get("type") == "function_call":
            arguments = item.get("arguments", "")
            add("response.function_call_arguments.delta", delta=arguments, **where)
            add("response.function_call_arguments.done", name=item.get("name"), **where)
            events[-1]["arguments"] = arguments
        add("response.output_item.done", output_index=index, item=item)
    final = "response.incomplete" if response.get("status") == "incomplete" else None
    add(final or "response.completed", response=response)
    return events


def _in_progress(item: dict[str, Any]) -> dict[str, Any]:
    if item.get("type") == "message":
        return item | {"status": "in_progress", "content": []}
    if item.get("type") == "function_call":
        return item | {"status": "in_progress", "arguments": ""}
    return item
