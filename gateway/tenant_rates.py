"""A tenant's request and token rates over the last minute, and the 429 past its limit.

Each rate is counted in one-second buckets over a sliding 60-second window. A request is
refused, before it is queued, when its tenant has started ``requests_per_minute``
requests in the window, or when the tokens charged in the window plus its prompt and
``max_tokens`` would pass ``tokens_per_minute``; its ``Retry-After`` is the time until
enough of the window has expired for it to pass. Tokens are charged as they happen: the
prompt when the request is admitted, completion tokens as they stream.

``MemoryRates`` counts in this process; ``RedisRates`` in the Redis of
``DLFP_REDIS_URL``, so replicas that share it share each tenant's rates (one Lua script
checks and charges atomically). Concurrency and queue limits stay per replica.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from redis.exceptions import RedisError

from gateway.admission import AdmissionRejected
from gateway.errors import APIError
from gateway.tenant_limits import TenantLimits

if TYPE_CHECKING:
    from gateway.settings import Settings

logger = logging.getLogger("dlfp.gateway")

WINDOW_S = 60
"""The window rates are counted over, s."""
PREFIX = "dlfp:rates:"


class Rates(Protocol):
    async def admit(self, tenant: str, limits: TenantLimits, tokens: int) -> None:
        """Charge one request, or raise the 429 of the limit it would pass; ``tokens`` is
        its prompt plus ``max_tokens``, checked against the token rate."""
        ...

    async def charge_tokens(self, tenant: str, tokens: int) -> None:
        """Tokens that happened (a prompt admitted, completion tokens streamed)."""
        ...

    async def close(self) -> None: ...


def retry_after_s(buckets: dict[int, int], now_s: int, used: int, needed: int, limit: int) -> int:
    """Seconds until the oldest buckets have expired enough for ``needed`` more to pass."""
    excess = used + needed - limit
    for second in sorted(buckets):
        excess -= buckets[second]
        if excess <= 0:
            return max(1, second + WINDOW_S - now_s)
    return WINDOW_S


def _refusal(tenant: str, limit_name: str, limit: int, retry_s: int) -> AdmissionRejected:
    return AdmissionRejected(
        f"tenant_{limit_name}",
        f"tenant {tenant!r} is over its {limit_name} ({limit})",
        retry_s,
    )


def check_fits(tenant: str, limits: TenantLimits, tokens: int) -> None:
    """A request that no minute could hold is a 400, not a 429 to retry forever."""
    limit = limits.tokens_per_minute
    if limit is not None and tokens > limit:
        raise APIError(
            400,
            f"the prompt and max_tokens ({tokens} tokens) exceed tenant {tenant!r}'s "
            f"tokens_per_minute ({limit}); lower max_tokens",
            param="max_tokens",
        )


class MemoryRates:
    """The rates of this process."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._buckets: dict[tuple[str, str], dict[int, int]] = defaultdict(dict)

    def _window(self, tenant: str, kind: str, now_s: int) -> tuple[dict[int, int], int]:
        buckets = self._buckets[(tenant, kind)]
        for second in [s for s in buckets if s <= now_s - WINDOW_S]:
            del buckets[second]
        return buckets, sum(buckets.values())

    async def admit(self, tenant: str, limits: TenantLimits, tokens: int) -> None:
        check_fits(tenant, limits, tokens)
        now_s = int(self._clock())
        for kind, limit, needed in (
            ("requests_per_minute", limits.requests_per_minute, 1),
            ("tokens_per_minute", limits.tokens_per_minute, tokens),
        ):
            buckets, used = self._window(tenant, kind, now_s)
            if limit is not None and used + needed > limit:
                retry_s = retry_after_s(buckets, now_s, used, needed, limit)
                raise _refusal(tenant, kind, limit, retry_s)
        requests, _ = self._window(tenant, "requests_per_minute", now_s)
        requests[now_s] = requests.get(now_s, 0) + 1

    async def charge_tokens(self, tenant: str, tokens: int) -> None:
        if tokens > 0:
            now_s = int(self._clock())
            buckets, _ = self._window(tenant, "tokens_per_minute", now_s)
            buckets[now_s] = buckets.get(now_s, 0) + tokens

    async def close(self) -> None:
        return None


# KEYS: requests hash, tokens hash. ARGV: now_s, window_s, rpm (-1 = none), tpm (-1 =
# none), tokens needed. Returns {0, 0} when admitted (one request charged), else
# {1 (requests) or 2 (tokens), retry_after_s}.
_ADMIT = """
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local function used(key)
  local total, seconds = 0, {}
  local fields = redis.call('HGETALL', key)
  for i = 1, #fields, 2 do
    local second, count = tonumber(fields[i]), tonumber(fields[i + 1])
    if second <= now - window then
      redis.call('HDEL', key, fields[i])
    else
      total = total + count
      table.insert(seconds, {second, count})
    end
  end
  table.sort(seconds, function(a, b) return a[1] < b[1] end)
  return total, seconds
end
local function retry(seconds, excess)
  for _, entry in ipairs(seconds) do
    excess = excess - entry[2]
    if excess <= 0 then return math.max(1, entry[1] + window - now) end
  end
  return window
end
local limits = {tonumber(ARGV[3]), tonumber(ARGV[4])}
local needed = {1, tonumber(ARGV[5])}
for index = 1, 2 do
  local total, seconds = used(KEYS[index])  -- prunes the expired seconds either way
  if limits[index] >= 0 and total + needed[index] > limits[index] then
    return {index, retry(seconds, total + needed[index] - limits[index])}
  end
end
redis.call('HINCRBY', KEYS[1], now, 1)
redis.call('EXPIRE', KEYS[1], window + 1)
return {0, 0}
"""


class RedisRates:
    """The rates in Redis, shared by the replicas that name it."""

    def __init__(self, url: str, clock: Callable[[], float] = time.time) -> None:
        from redis.asyncio import Redis

        self._clock = clock
        self._redis: Any = Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self._admit = self._redis.register_script(_ADMIT)

    @staticmethod
    def _keys(tenant: str) -> list[str]:
        return [f"{PREFIX}{tenant}:requests", f"{PREFIX}{tenant}:tokens"]

    async def admit(self, tenant: str, limits: TenantLimits, tokens: int) -> None:
        check_fits(tenant, limits, tokens)
        if limits.requests_per_minute is None and limits.tokens_per_minute is None:
            return
        rpm = -1 if limits.requests_per_minute is None else limits.requests_per_minute
        tpm = -1 if limits.tokens_per_minute is None else limits.tokens_per_minute
        now_s = int(self._clock())
        args = [now_s, WINDOW_S, rpm, tpm, tokens]
        try:
            which, retry_s = await self._admit(keys=self._keys(tenant), args=args)
        except (OSError, RedisError) as exc:
            # NOTE: fails open: a Redis that is away must not stop every tenant's requests.
            logger.warning(
                "tenant rates unavailable; admitted unchecked",
                extra={"event": "tenant_rates_unavailable", "tenant": tenant, "error": str(exc)},
            )
            return
        if which == 1:
            raise _refusal(tenant, "requests_per_minute", rpm, int(retry_s))
        if which == 2:
            raise _refusal(tenant, "tokens_per_minute", tpm, int(retry_s))

    async def charge_tokens(self, tenant: str, tokens: int) -> None:
        if tokens > 0:
            key = self._keys(tenant)[1]
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.hincrby(key, str(int(self._clock())), tokens)
                pipe.expire(key, WINDOW_S + 1)
                await pipe.execute()

    async def close(self) -> None:
        await self._redis.aclose()


def build_rates(settings: Settings) -> Rates:
    """In Redis where ``DLFP_REDIS_URL`` names one (shared by the replicas), else here."""
    if settings.redis_url is not None:
        return RedisRates(settings.redis_url.get_secret_value())
    return MemoryRates()
