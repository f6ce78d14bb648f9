"""An engine request in flight, measured where the client sees it, closed once.

Its chunks pass through the request's ``RequestMeter`` as they leave for the client.
Admission's sample of the time to a first token is the engine's instead: taken when the
engine produced it (``RequestStream.first_output``), so a client that reads slowly, or
not at all, delays its own stream and not the estimate every other request is judged by.
``aclose()`` is the one exit: it closes the engine stream (which aborts the engine
request if unfinished: ``engine_worker.contract.api.RequestStream``), frees the admission slot,
and has the meter record the outcome, once, however the request ended.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack

from engine_worker.contract.api import Engine, GenerationChunk, RequestStream, SamplingOptions
from gateway.admission import Ticket
from gateway.engine_watch import EngineWatch
from gateway.metrics import Outcome
from gateway.request_meter import RequestMeter

logger = logging.getLogger("dlfp.gateway")

_CLOSING: set[asyncio.Future[None]] = set()
"""Closings in progress, held until they end (the loop keeps only weak references)."""


class MeasuredStream:
    def __init__(
        self,
        engine: Engine,
        watch: EngineWatch,
        meter: RequestMeter,
        completion_id: str,
        ticket: Ticket,
        slot: AsyncExitStack,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._engine = engine
        self._watch = watch
        self.completion_id = completion_id
        self._meter = meter
        self._outcome: Outcome = "aborted"
        self._ticket = ticket
        self._slot = slot
        self._clock = clock
        self._engine_stream: RequestStream | None = None
        self._first_output: asyncio.Task[None] | None = None
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
    def num_prompt_tokens(self) -> int:
        return self._meter.num_prompt_tokens or 0

    @property
    def num_generated(self) -> int:
        return self._meter.num_generated

    async def submit(
        self, prompt_ids: list[int], options: SamplingOptions, priority: int, salt: str | None
    ) -> None:
        """Enqueue in the engine; if the engine refuses, frees the slot and raises."""
        engine = self._engine
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
        self._meter.submitted(len(prompt_ids))
        self._first_output = asyncio.create_task(self._count_first_output(self._engine_stream))

    async def _count_first_output(self, stream: RequestStream) -> None:
        try:
            if await stream.first_output():
                self._ticket.first_token()
        except Exception:  # a sample lost, never the request: the reader sees the error
            logger.exception("first output not timed", extra={"event": "first_output_failed"})

    async def chunks(self) -> AsyncIterator[GenerationChunk]:
        """The engine's outputs, measured as they pass."""
        if self._engine_stream is None:
            return
        try:
            while (chunk := await self._next_output(self._engine_stream)) is not None:
                self._meter.observe(chunk, self._clock())
                yield chunk
                if chunk.finished:
                    self.end_as("ok")
        except Exception:
            self.end_as("server_error")
            raise

    async def _next_output(self, stream: RequestStream) -> GenerationChunk | None:
        """The next engine output (None at the end), timed by the hung-engine watch."""
        watch, chunk = self._watch, None
        watch.waiting()
        try:
            chunk = await anext(stream, None)
        finally:
            watch.done_waiting(got_output=chunk is not None)
        return chunk

    async def aclose(self) -> None:
        """Idempotent: end the engine request if unfinished, free the slot, record.

        The closing runs to its end even when its caller is cancelled: a client's
        disconnect cancels the response's task group, whose cancellation is raised again
        at every await within it, and an abort skipped there would leave the engine
        request decoding to its ``max_tokens`` for no one."""
        if self._closed:
            return
        self._closed = True
        closing = asyncio.ensure_future(self._close())
        _CLOSING.add(closing)
        closing.add_done_callback(_CLOSING.discard)
        await asyncio.shield(closing)

    async def _close(self) -> None:
        stream, self._engine_stream = self._engine_stream, None
        timing, self._first_output = self._first_output, None
        try:
            if timing is not None:
                timing.cancel()
                await asyncio.wait({timing})  # raises nothing of the task's
            if stream is not None:
                await stream.aclose()
        finally:
            await self._slot.aclose()
            self._meter.ended(self._outcome, self.completion_id)
