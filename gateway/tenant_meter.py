"""What one request adds to its tenant's series (``tenant_metrics``) and token rate
(``tenant_rates``): the request's ``RequestMeter`` tells it what happened."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from gateway.metrics import Outcome
from gateway.tenant_metrics import TenantMetrics
from gateway.tenants import DEFAULT_TENANT

logger = logging.getLogger("dlfp.gateway")

CHARGE_EVERY_S = 1.0
"""Completion tokens are charged to the tenant's rate at most this often per request."""

Charge = Callable[[str, int], Coroutine[Any, Any, None]]


class TenantMeter:
    """One request's share of its tenant's use; without metrics, it only names the tenant."""

    def __init__(
        self,
        name: str = DEFAULT_TENANT,
        metrics: TenantMetrics | None = None,
        charge: Charge | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._metrics = metrics
        self._charge = charge
        self._clock = clock
        self._num_slots = 0
        self._admitted_s = 0.0
        self._uncharged = 0
        self._charged_s = clock()
        self._tasks: set[asyncio.Task[None]] = set()

    def admitted(self, queue_s: float, num_slots: int) -> None:
        if self._metrics is not None:
            self._metrics.queue_wait.labels(tenant=self.name).observe(queue_s)
            self._metrics.slots.labels(tenant=self.name).inc(num_slots)
        self._num_slots = num_slots
        self._admitted_s = self._clock()

    def released(self) -> None:
        """Its slots are free again (called once, as the slot is released)."""
        if self._metrics is not None and self._num_slots:
            held_s = self._clock() - self._admitted_s
            self._metrics.slots.labels(tenant=self.name).dec(self._num_slots)
            self._metrics.slot_seconds.labels(tenant=self.name).inc(held_s * self._num_slots)
        self._num_slots = 0

    def prompt(self, num_tokens: int) -> None:
        if self._metrics is not None:
            self._metrics.prompt_tokens.labels(tenant=self.name).inc(num_tokens)
        self._send(num_tokens)

    def first_token(self, ttft_s: float) -> None:
        if self._metrics is not None:
            self._metrics.ttft.labels(tenant=self.name).observe(ttft_s)

    def completion(self, num_tokens: int) -> None:
        if self._metrics is not None:
            self._metrics.completion_tokens.labels(tenant=self.name).inc(num_tokens)
        self._uncharged += num_tokens
        if self._clock() - self._charged_s >= CHARGE_EVERY_S:
            self._flush()

    def ended(self, outcome: Outcome) -> None:
        if self._metrics is not None:
            self._metrics.requests.labels(tenant=self.name, outcome=outcome).inc()
        self._flush()

    def _flush(self) -> None:
        self._charged_s = self._clock()
        tokens, self._uncharged = self._uncharged, 0
        self._send(tokens)

    def _send(self, tokens: int) -> None:
        if self._charge is None or tokens <= 0:
            return
        task = asyncio.ensure_future(self._charge(self.name, tokens))
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning(
                "tokens not charged to the tenant's rate",
                extra={
                    "event": "tenant_charge_failed",
                    "tenant": self.name,
                    "error": str(task.exception()),
                },
            )
