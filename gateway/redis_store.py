"""The response store in Redis, shared by every replica that names the same server.

Each entry is one key with the store's time-to-live; an index (a sorted set by
insertion time, each member's size in a hash, their total in a counter) lets one Lua
script add an entry and evict in the same step, atomically for every replica: expired
members first, then the oldest while a bound is exceeded. An output item's id maps to
its response under a key of its own with the same time-to-live. Any Redis failure is
``StoreUnavailableError`` (a 503 for the call that needed the store).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from gateway.response_store import (
    StoreBounds,
    StoredResponse,
    StoreUnavailableError,
    checked_size,
)

PREFIX = "dlfp:responses:"
logger = logging.getLogger("dlfp.gateway")

# KEYS: entry, index, sizes, total; ARGV: member, blob, ttl_ms, now_ms, max_entries,
# max_bytes, entry key prefix. Returns the entries and bytes after eviction.
_PUT = """
local function drop(member)
  local size = redis.call('HGET', KEYS[3], member)
  if size then redis.call('DECRBY', KEYS[4], size) end
  redis.call('HDEL', KEYS[3], member)
  redis.call('ZREM', KEYS[2], member)
  redis.call('DEL', ARGV[7] .. member)
end
drop(ARGV[1])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], string.len(ARGV[2]))
redis.call('INCRBY', KEYS[4], string.len(ARGV[2]))
local cutoff = tonumber(ARGV[4]) - tonumber(ARGV[3])
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', cutoff)) do
  drop(member)
end
while redis.call('ZCARD', KEYS[2]) > tonumber(ARGV[5])
    or tonumber(redis.call('GET', KEYS[4]) or '0') > tonumber(ARGV[6]) do
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if not oldest then break end
  drop(oldest)
end
return {redis.call('ZCARD', KEYS[2]), tonumber(redis.call('GET', KEYS[4]) or '0')}
"""

# KEYS: entry, index, sizes, total; ARGV: member. Returns existed, entries, bytes.
_DELETE = """
local existed = redis.call('DEL', KEYS[1])
local size = redis.call('HGET', KEYS[3], ARGV[1])
if size then redis.call('DECRBY', KEYS[4], size) end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return {existed, redis.call('ZCARD', KEYS[2]), tonumber(redis.call('GET', KEYS[4]) or '0')}
"""


class RedisStore:
    backend = "redis"

    def __init__(
        self,
        url: str,
        bounds: StoreBounds,
        timeout_s: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``clock``: wall seconds, shared by replicas (the index orders entries by it)."""
        from redis.asyncio import Redis

        self._bounds = bounds
        self._clock = clock
        self._redis = Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )
        self._put = self._redis.register_script(_PUT)
        self._delete = self._redis.register_script(_DELETE)
        self._size = (0, 0)
        self._index_keys = [f"{PREFIX}index", f"{PREFIX}sizes", f"{PREFIX}bytes"]

    async def put(self, owner: str, stored: StoredResponse) -> None:
        member = f"{owner}:{stored.id}"
        ttl_ms = max(1, int(self._bounds.ttl_s * 1000))
        blob = checked_size(stored.encode(), self._bounds)
        args: list[Any] = [member, blob, ttl_ms, int(self._clock() * 1000)]
        args += [self._bounds.max_entries, self._bounds.max_bytes, f"{PREFIX}r:"]
        async with _unavailable_on_error():
            entries, num_bytes = await self._put(
                keys=[f"{PREFIX}r:{member}", *self._index_keys], args=args
            )
            async with self._redis.pipeline(transaction=False) as pipe:
                for item_id in stored.item_ids():
                    pipe.set(f"{PREFIX}i:{owner}:{item_id}", stored.id, px=ttl_ms)
                await pipe.execute()
        self._size = (int(entries), int(num_bytes))

    async def get(self, owner: str, response_id: str) -> StoredResponse | None:
        async with _unavailable_on_error():
            blob = await self._redis.get(f"{PREFIX}r:{owner}:{response_id}")
        return None if blob is None else StoredResponse.decode(blob)

    async def delete(self, owner: str, response_id: str) -> bool:
        member = f"{owner}:{response_id}"
        async with _unavailable_on_error():
            existed, entries, num_bytes = await self._delete(
                keys=[f"{PREFIX}r:{member}", *self._index_keys], args=[member]
            )
        self._size = (int(entries), int(num_bytes))
        return bool(existed)

    async def item(self, owner: str, item_id: str) -> dict[str, Any] | None:
        async with _unavailable_on_error():
            response_id = await self._redis.get(f"{PREFIX}i:{owner}:{item_id}")
        if response_id is None:
            return None
        key = response_id.decode() if isinstance(response_id, bytes) else str(response_id)
        stored = await self.get(owner, key)
        return None if stored is None else stored.output_item(item_id)

    def size(self) -> tuple[int, int]:
        return self._size

    async def close(self) -> None:
        await self._redis.aclose()


@contextlib.asynccontextmanager
async def _unavailable_on_error() -> AsyncIterator[None]:
    """Redis errors and time-outs as ``StoreUnavailableError``."""
    from redis.exceptions import RedisError

    try:
        yield
    except (RedisError, OSError, TimeoutError) as exc:
        # NOTE: the client gets a fixed message; Redis's own names its host and port.
        logger.warning(
            "response store unreachable",
            extra={"event": "response_store_unreachable", "error": str(exc)},
        )
        raise StoreUnavailableError("the response store is unavailable") from exc
