"""One request's life in the engine: submit, stream, measure, release.

Latency is measured here, at the moment a token leaves for the client: one
TTFT sample at the first content token, one ITL sample per later token (tokens
that share one engine output count as zero gaps), and the request's outcome.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from engine_worker.api import (
    Engine,
    EngineDeadError,
    GenerationChunk,
    SamplingOptions,
)
from gateway.metrics import GatewayMetrics

logger = logging.getLogger("dlfp.request")


@dataclass
class PreparedRequest:
    """A validated request, ready for the engine."""

    request_id: str
    endpoint: str
    prompt_token_ids: list[int]
    options: SamplingOptions
    priority: int = 0
    cache_salt: str | None = None


@dataclass
class StreamStats:
    arrival_s: float
    first_token_s: float | None = None
    last_token_s: float | None = None
    num_prompt_tokens: int = 0
    num_generated_tokens: dict[int, int] = field(default_factory=dict)

    @property
    def total_generated(self) -> int:
        return sum(self.num_generated_tokens.values())


class Generation:
    """Runs one prepared request and records what the client experiences."""

    def __init__(
        self,
        engine: Engine,
        metrics: GatewayMetrics,
        request: PreparedRequest,
        arrival_s: float,
        release: Callable[[], Awaitable[None]] | None = None,
        on_first_token: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.engine = engine
        self.metrics = metrics
        self.request = request
        self.stats = StreamStats(arrival_s=arrival_s)
        self.outcome = "aborted"
        self._release = release
        self._on_first_token = on_first_token
        self._clock = clock
        self._stream: AsyncIterator[GenerationChunk] | None = None
        self._last_token_s: dict[int, float] = {}
        self._closed = False

    async def start(self) -> None:
        """Submit to the engine; raises before anything is sent if the engine refuses."""
        r = self.request
        try:
            # vLLM refuses a priority unless it runs priority scheduling.
            priority = r.priority if self.engine.info.extra.get("priority_scheduling") else 0
            self._stream = await self.engine.submit(
                r.request_id, r.prompt_token_ids, r.options, priority, r.cache_salt
            )
        except BaseException:
            await self._release_slot()
            raise
        self.stats.num_prompt_tokens = len(r.prompt_token_ids)
        self.metrics.active_requests.inc()
        self.metrics.prompt_tokens.inc(len(r.prompt_token_ids))

    async def chunks(self) -> AsyncIterator[GenerationChunk]:
        """The engine's outputs, measured as they pass; closes the request at the end."""
        assert self._stream is not None, "start() first"
        try:
            async for chunk in self._stream:
                self._observe(chunk)
                yield chunk
                if chunk.finished:
                    self.outcome = "ok"
        except EngineDeadError:
            self.outcome = "server_error"
            raise
        except (asyncio.CancelledError, GeneratorExit):
            self.outcome = "aborted"
            raise
        finally:
            await self.close()

    def _observe(self, chunk: GenerationChunk) -> None:
        now = self._clock()
        for choice in chunk.choices:
            n = len(choice.token_ids)
            if n == 0:
                continue
            previous = self._last_token_s.get(choice.index)
            if previous is None:
                if self.stats.first_token_s is None:
                    self.stats.first_token_s = now
                    self.metrics.ttft.observe(now - self.stats.arrival_s)
                    if self._on_first_token is not None:
                        self._on_first_token()
            else:
                self.metrics.itl.observe(now - previous)
            for _ in range(n - 1):
                self.metrics.itl.observe(0.0)
            self._last_token_s[choice.index] = now
            self.stats.num_generated_tokens[choice.index] = (
                self.stats.num_generated_tokens.get(choice.index, 0) + n
            )
            self.metrics.generation_tokens.inc(n)
        self.stats.last_token_s = now

    async def close(self) -> None:
        """Idempotent: abort the engine request if unfinished, free the slot, record."""
        if self._closed:
            return
        self._closed = True
        stream, self._stream = self._stream, None
        if stream is not None and hasattr(stream, "aclose"):
            await stream.aclose()
        if stream is not None and self.outcome != "ok":
            # NOTE: closing a stream that never started runs none of its cleanup,
            # so abort explicitly; vLLM ignores an abort of a finished request.
            await self.engine.abort(self.request.request_id)
        if stream is not None:
            self.metrics.active_requests.dec()
            end = self.stats.last_token_s or self._clock()
            if self.outcome == "ok":
                self.metrics.e2e.observe(end - self.stats.arrival_s)
        await self._release_slot()
        logger.info(
            "request finished",
            extra={
                "event": "request_finished",
                "request_id": self.request.request_id,
                "endpoint": self.request.endpoint,
                "outcome": self.outcome,
                "prompt_tokens": self.stats.num_prompt_tokens,
                "completion_tokens": self.stats.total_generated,
                "ttft_s": None
                if self.stats.first_token_s is None
                else round(self.stats.first_token_s - self.stats.arrival_s, 4),
            },
        )

    async def _release_slot(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            await release()
