"""Stored responses, in this process (``memory``) or in a Redis that replicas share.

A stored response is the Response object a client got and the conversation before it
(the input items, resolved), as ``previous_response_id`` needs both; its output items
are found by id for ``item_reference``. Entries belong to an owner (the API key's
digest) and are found only under it. Both backends keep the same bounds: at most
``max_entries`` entries and ``max_bytes`` bytes of encoded entries, each for ``ttl_s``
at most; past a bound the oldest entries go first.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


class StoreUnavailableError(Exception):
    """The store cannot be reached (Redis down or too slow): a 503 for the call."""


class EntryTooLargeError(Exception):
    """One response, with the conversation before it, is over ``max_bytes``: not stored."""


@dataclass(frozen=True)
class StoreBounds:
    max_entries: int
    max_bytes: int
    ttl_s: float


@dataclass(frozen=True)
class StoredResponse:
    response: dict[str, Any]
    """The Response object as the client got it."""
    input_items: list[dict[str, Any]]
    """The conversation before it: the input items it answered, references resolved."""

    @property
    def id(self) -> str:
        return str(self.response["id"])

    def item_ids(self) -> list[str]:
        return [str(item["id"]) for item in self.response.get("output", []) if item.get("id")]

    def output_item(self, item_id: str) -> dict[str, Any] | None:
        return next((i for i in self.response.get("output", []) if i.get("id") == item_id), None)

    def encode(self) -> bytes:
        return json.dumps({"response": self.response, "input": self.input_items}).encode()

    @classmethod
    def decode(cls, blob: bytes | str) -> StoredResponse:
        data = json.loads(blob)
        return cls(response=data["response"], input_items=data["input"])


def checked_size(blob: bytes, bounds: StoreBounds) -> bytes:
    if len(blob) > bounds.max_bytes:
        raise EntryTooLargeError(
            f"the response and its conversation are {len(blob)} bytes, over the store's "
            f"{bounds.max_bytes} (DLFP_RESPONSE_STORE_MAX_BYTES)"
        )
    return blob


class ResponseStore(Protocol):
    backend: str

    async def put(self, owner: str, stored: StoredResponse) -> None: ...

    async def get(self, owner: str, response_id: str) -> StoredResponse | None: ...

    async def delete(self, owner: str, response_id: str) -> bool: ...

    async def item(self, owner: str, item_id: str) -> dict[str, Any] | None:
        """An output item by its id (``msg_``, ``fc_``, ``rs_``), from a live response."""
        ...

    def size(self) -> tuple[int, int]:
        """Entries and bytes, as of the store's last change seen here."""
        ...

    async def close(self) -> None: ...


@dataclass
class _Entry:
    expires_at: float
    blob: bytes
    item_ids: list[str]


class MemoryStore:
    """One process's store: an insertion-ordered dict, so the oldest entry is first."""

    backend = "memory"

    def __init__(self, bounds: StoreBounds, clock: Callable[[], float] = time.monotonic) -> None:
        self._bounds = bounds
        self._clock = clock
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._items: dict[tuple[str, str], str] = {}
        self._num_bytes = 0

    async def put(self, owner: str, stored: StoredResponse) -> None:
        blob = checked_size(stored.encode(), self._bounds)
        key = (owner, stored.id)
        self._drop(key)
        entry = _Entry(self._clock() + self._bounds.ttl_s, blob, stored.item_ids())
        self._entries[key] = entry
        self._num_bytes += len(entry.blob)
        for item_id in entry.item_ids:
            self._items[(owner, item_id)] = stored.id
        self._evict()

    async def get(self, owner: str, response_id: str) -> StoredResponse | None:
        self._evict()
        entry = self._entries.get((owner, response_id))
        return None if entry is None else StoredResponse.decode(entry.blob)

    async def delete(self, owner: str, response_id: str) -> bool:
        self._evict()
        return self._drop((owner, response_id))

    async def item(self, owner: str, item_id: str) -> dict[str, Any] | None:
        response_id = self._items.get((owner, item_id))
        stored = None if response_id is None else await self.get(owner, response_id)
        return None if stored is None else stored.output_item(item_id)

    def size(self) -> tuple[int, int]:
        return len(self._entries), self._num_bytes

    async def close(self) -> None:
        self._entries.clear()
        self._items.clear()
        self._num_bytes = 0

    def _evict(self) -> None:
        """Expired entries, then the oldest while a bound is exceeded: all at the front,
        since every entry lives ``ttl_s`` from its insertion."""
        now, bounds = self._clock(), self._bounds
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            over = len(self._entries) > bounds.max_entries or self._num_bytes > bounds.max_bytes
            if entry.expires_at > now and not over:
                return
            self._drop(key)

    def _drop(self, key: tuple[str, str]) -> bool:
        entry = self._entries.pop(key, None)
        if entry is None:
            return False
        self._num_bytes -= len(entry.blob)
        for item_id in entry.item_ids:
            self._items.pop((key[0], item_id), None)
        return True
