"""Whether the gateway serves: the engine's health as the gateway knows it, and the drain.

``/ready`` and the probe port answer ``readiness()``; a request is refused by
``check_serving()`` while the gateway drains or the engine cannot serve.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from engine_worker.contract.api import Engine
from gateway.admission import Admission, AdmissionRejected
from gateway.errors import engine_unavailable


@dataclass
class ServingStatus:
    engine: Engine
    admission: Admission
    engine_error: str | None = None
    """Why the engine cannot serve (it failed to start, died or hung); None while it can."""
    engine_starting: bool = False
    """Between the engine's start and admission's reading of its start-up fit."""
    streams_cut: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the drain period ends: every request still running stops at once."""

    @property
    def is_ready(self) -> bool:
        return (
            self.engine.is_ready
            and not self.engine_starting
            and not self.draining
            and self.engine_error is None
        )

    @property
    def draining(self) -> bool:
        return self.admission.draining

    def readiness(self) -> tuple[int, dict[str, str]]:
        """``/ready``'s status and body: 200 only while the engine serves and the gateway
        admits requests, else 503 with the reason."""
        if self.is_ready:
            return 200, {"status": "ready"}
        if self.draining:
            reason = "draining"
        elif self.engine.is_dead or self.engine_error:
            reason = f"engine failed: {self.engine_error or 'engine core died'}"
        else:
            reason = "engine loading"
        return 503, {"status": "unavailable", "reason": reason}

    def start_draining(self) -> None:
        """Stop admitting: /ready turns 503 and queued requests are refused."""
        self.admission.reject_all_queued()

    def cut_streams(self) -> None:
        """The drain deadline: requests still running end now, with an error."""
        self.streams_cut.set()

    def check_serving(self) -> None:
        if self.draining:
            raise AdmissionRejected("draining", "the gateway is shutting down", 5)
        self.check_engine()

    def check_engine(self) -> None:
        if self.engine.is_dead or self.engine_error is not None:
            raise engine_unavailable(f"the engine is down: {self.engine_error or 'it died'}")
        if not self.engine.is_ready:
            raise engine_unavailable("the engine is still loading")
