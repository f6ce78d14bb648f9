"""An engine request in flight, measured where the client sees it, closed once.

Latency is measured as a token leaves for the client: one TTFT sample at the
first content token, one ITL sample per later token (tokens that share one engine
output count as zero gaps). ``aclose()`` is the one exit: it aborts the engine
request if unfinished, frees the admission slot, and records the outcome, the
metrics and the ``request_finished`` log line, once, however the request ended.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from typing import Literal

from engine_worker.api import GenerationChunk, SamplingOptions
from gateway.admission import Ticket
from gateway.state import GatewayState

logger = logging.getLogger("dlfp.request")


Outcome = Literal["ok", "aborted", "client_stalled", "server_error"]


class MeasuredStream:
    def __init__(
        self,
        gateway: GatewayState,
        endpoint: str,
        completion_id: str,
        arrival_s: float,
        ticket: Ticket,
        slot: AsyncExitStack,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.gateway = gateway
        self.endpoint = endpoint
        self.completion_id = completion_id
        self._outcome: Outcome = "aborted"
        self.num_prompt_tokens = 0
        self._arrival_s = arrival_s
        self._ticket = ticket
        self._slot = slot
        self._clock = clock
        self._engine_stream: AsyncIterator[GenerationChunk] | None = None
        self._first_token_s: float | None = None
        self._last_token_s: dict[int, float] = {}
        self._num_generated: dict[int, int] = {}
        self._closed = False

    @property
    def outcome(self) -> Outcome:
        """ok, aborted (the client left: the default), client_stalled (it stopped reading)
        or server_error, as ``dlfp_requests_total`` counts it."""
        return self._outcome

    def end_as(self, outcome: Outcome) -> None:
        """How the request ended, told before ``aclose()``; after it, nothing changes."""
        if not self._closed:
            self._outcome = outcome

    @property
    def num_generated(self) -> int:
        return sum(self._num_generated.values())

    async def submit(
        self, prompt_ids: list[int], options: SamplingOptions, priority: int, salt: str | None
    ) -> None:
        """Enqueue in the engine; if the engine refuses, frees the slot and raises."""
        engine = self.gateway.engine
        # vLLM refuses a priority unless it runs priority scheduling.
        priority = priority if engine.info.priority_scheduling else 0
        try:
            self._engine_stream = await engine.submit(
                self.completion_id, prompt_ids, options, priority, salt
            )
        except BaseException:
            # Never in the engine: free the slot; the lifecycle records the refusal.
            self._closed = True
            await self._slot.aclose()
            raise
        self.num_prompt_tokens = len(prompt_ids)
        self.gateway.metrics.active_requests.inc()
        self.gateway.metrics.prompt_tokens.inc(len(prompt_ids))

    async def chunks(self) -> AsyncIterator[GenerationChunk]:
        """The engine's outputs, measured as they pass."""
        if self._engine_stream is None:
            return
        try:
            while (chunk := await self._next_output(self._engine_stream)) is not None:
                self._observe(chunk)
                yield chunk
                if chunk.finished:
                    self.end_as("ok")
        except Exception:
            self.end_as("server_error")
            raise

    async def _next_output(self, stream: AsyncIterator[GenerationChunk]) -> GenerationChunk | None:
        """The next engine output (None at the end), timed by the hung-engine watch."""
        watch, chunk = self.gateway.watch, None
        watch.waiting()
        try:
            chunk = await anext(stream, None)
        finally:
            watch.done_waiting(got_output=chunk is not None)
        return chunk

    def _observe(self, chunk: GenerationChunk) -> None:
        now = self._clock()
        metrics = self.gateway.metrics
        for choice in chunk.choices:
            n = len(choice.token_ids)
            if n == 0:
                continue
            previous = self._last_token_s.get(choice.index)
            if previous is not None:
                metrics.itl.observe(now - previous)
            elif self._first_token_s is None:
                self._first_token_s = now
                metrics.ttft.observe(now - self._arrival_s)
                self._ticket.first_token()
            for _ in range(n - 1):
                metrics.itl.observe(0.0)
            self._last_token_s[choice.index] = now
            self._num_generated[choice.index] = self._num_generated.get(choice.index, 0) + n
            metrics.generation_tokens.inc(n)

    async def aclose(self) -> None:
        """Idempotent: abort the engine request if unfinished, free the slot, record."""
        if self._closed:
            return
        self._closed = True
        stream, self._engine_stream = self._engine_stream, None
        try:
            if stream is not None:
                await self._stop(stream)
        finally:
            await self._slot.aclose()
            self._record()

    async def _stop(self, stream: AsyncIterator[GenerationChunk]) -> None:
        self.gateway.metrics.active_requests.dec()
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            # RuntimeError: still running in a task being cancelled; the abort below ends it.
            with contextlib.suppress(RuntimeError):
                await aclose()
        if self._outcome != "ok":
            # NOTE: closing a stream that never started runs none of its cleanup,
            # so abort explicitly; vLLM ignores an abort of a finished request.
            await self.gateway.engine.abort(self.completion_id)

    def _record(self) -> None:
        metrics = self.gateway.metrics
        metrics.requests.labels(endpoint=self.endpoint, outcome=self._outcome).inc()
        last = max(self._last_token_s.values(), default=None)
        if self._outcome == "ok" and last is not None:
            metrics.e2e.observe(last - self._arrival_s)
        ttft = None if self._first_token_s is None else self._first_token_s - self._arrival_s
        logger.info(
            "request finished",
            extra={
                "event": "request_finished",
                "completion_id": self.completion_id,
                "endpoint": self.endpoint,
                "outcome": self._outcome,
                "prompt_tokens": self.num_prompt_tokens,
                "completion_tokens": self.num_generated,
                "ttft_s": None if ttft is None else round(ttft, 4),
            },
        )
