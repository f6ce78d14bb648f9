"""The gateway's shared state: settings, engine, metrics, and the settings in force."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

from fastapi import Request

from engine_worker.api import Engine
from engine_worker.dlfp_config import DLFPConfig
from gateway.admission import Admission, AdmissionRejected, ClientDisconnected, Ticket
from gateway.errors import engine_unavailable
from gateway.generation import Generation, PreparedRequest
from gateway.metrics import GatewayMetrics
from gateway.settings import Settings

logger = logging.getLogger("dlfp.gateway")


@dataclass
class GatewayState:
    """One per app; routes reach it through ``deps.GatewayDep``."""

    settings: Settings
    engine: Engine
    metrics: GatewayMetrics
    dlfp: DLFPConfig
    admission: Admission
    keepalive_s: float = 10.0
    engine_error: str | None = None
    dlfp_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    admission_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def is_ready(self) -> bool:
        return self.engine.is_ready and not self.draining and self.engine_error is None

    def response_headers(self, request: Request) -> dict[str, str]:
        return {"X-Request-Id": request.state.request_id}

    @property
    def draining(self) -> bool:
        return self.admission.draining

    def start_draining(self) -> None:
        """Stop admitting: /ready turns 503 and queued requests are refused."""
        self.admission.reject_all_queued()

    def check_serving(self) -> None:
        if self.draining:
            raise AdmissionRejected("draining", "the gateway is shutting down", 5)
        self.check_engine()

    def check_engine(self) -> None:
        if self.engine.is_dead or self.engine_error is not None:
            raise engine_unavailable("the engine is down")
        if not self.engine.is_ready:
            raise engine_unavailable("the engine is still loading")

    async def start_generation(self, prepared: PreparedRequest, request: Request) -> Generation:
        """Admit and submit a validated request; raises before anything streams."""
        self.check_serving()
        stack = AsyncExitStack()
        ticket = await self._admit(prepared, request, stack)
        self.metrics.queue.observe(ticket.queue_s)
        generation = Generation(
            self.engine,
            self.metrics,
            prepared,
            request.state.arrival_s,
            release=stack.aclose,
            on_first_token=ticket.first_token,
        )
        await generation.start()
        return generation

    async def _admit(
        self, prepared: PreparedRequest, request: Request, stack: AsyncExitStack
    ) -> Ticket:
        """Wait for a slot, unless the client leaves first (then the slot is never taken)."""
        slot = self.admission.slot(
            prefill_tokens=len(prepared.prompt_token_ids),
            priority=prepared.priority,
            ttft_slo_s=self.dlfp.ttft_slo_ms / 1000,
        )
        self.metrics.queued_requests.inc()
        acquire = asyncio.ensure_future(stack.enter_async_context(slot))
        left = asyncio.ensure_future(_until_disconnected(request))
        try:
            await asyncio.wait({acquire, left}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.metrics.queued_requests.dec()
            left.cancel()
        if not acquire.done():
            acquire.cancel()
            with contextlib.suppress(asyncio.CancelledError, AdmissionRejected):
                await acquire
            await stack.aclose()
            raise ClientDisconnected()
        return acquire.result()


async def _until_disconnected(request: Request) -> None:
    # NOTE: the body has been read by now, so the next ASGI message is the
    # disconnect; servers repeat it to later listeners such as StreamingResponse.
    while (await request.receive())["type"] != "http.disconnect":
        pass
