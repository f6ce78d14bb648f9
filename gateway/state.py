"""The gateway's shared state: settings, engine, metrics, and the settings in force."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from fastapi import Request

from engine_worker.api import Engine
from engine_worker.dlfp_config import DLFPConfig
from gateway.errors import APIError, engine_unavailable
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
    keepalive_s: float = 10.0
    draining: bool = False
    engine_error: str | None = None
    dlfp_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    started_unix_s: float = field(default_factory=time.time)

    @property
    def is_ready(self) -> bool:
        return self.engine.is_ready and not self.draining and self.engine_error is None

    def response_headers(self, request: Request) -> dict[str, str]:
        return {"X-Request-Id": request.state.request_id}

    def check_serving(self) -> None:
        if self.draining:
            raise APIError(503, "the gateway is shutting down", code="draining",
                           headers={"Retry-After": "5"})  # fmt: skip
        self.check_engine()

    def check_engine(self) -> None:
        if self.engine.is_dead or self.engine_error is not None:
            raise engine_unavailable("the engine is down")
        if not self.engine.is_ready:
            raise engine_unavailable("the engine is still loading")

    async def start_generation(self, prepared: PreparedRequest, request: Request) -> Generation:
        """Submit a validated request; raises an APIError before anything streams."""
        self.check_serving()
        generation = Generation(self.engine, self.metrics, prepared, request.state.arrival_s)
        await generation.start()
        return generation
