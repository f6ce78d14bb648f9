"""Admission control: a cap on concurrent streams, a bounded priority queue, and
an SLO check that turns away early a request that would miss its TTFT target.

Plain asyncio, no HTTP: ``async with admission.slot(...)`` waits for a slot or
raises ``AdmissionRejected``, which one exception handler maps to 429/503.

The TTFT prediction (``ttft_estimate``): a fixed per-request latency plus a time
per token of the prefill work ahead of a request (prompt tokens of requests admitted
but not yet streaming, plus those queued before it) and its own prompt. A request
with nothing ahead of it is never refused for the SLO: refusing it would help no one,
and a refused prompt never adds the sample that would correct the estimate.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from gateway.ttft_estimate import TTFTEstimate


class AdmissionLimits(BaseModel):
    """The runtime-tunable limits, validated as a whole."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, allow_inf_nan=False, use_attribute_docstrings=True
    )

    max_concurrent: int = Field(default=32, ge=1, le=100_000)
    """Most requests streaming at once."""
    max_queue: int = Field(default=128, ge=0, le=1_000_000)
    """Most requests waiting for a slot."""
    max_queue_wait_s: float = Field(default=60.0, gt=0, le=3600)
    """Longest a request waits for a slot before a 429."""
    slo_check: bool = True
    """Turn away requests predicted to miss ttft_slo_ms."""
    min_slo_samples: int = Field(default=4, ge=1)
    """Measured first tokens needed before the SLO check trusts its throughput."""


class AdmissionRejected(Exception):
    """Turned away; ``reason`` is a ``dlfp_admission_rejections_total`` label."""

    def __init__(self, reason: str, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after_s = retry_after_s


class ClientDisconnected(Exception):
    """The client went away before its request was admitted."""


@dataclass(order=True)
class _Waiter:
    priority: int
    seq: int
    prefill_tokens: int = field(compare=False)
    future: asyncio.Future[None] = field(compare=False)


@dataclass
class Ticket:
    """A held slot; call ``first_token()`` when the request starts streaming."""

    prefill_tokens: int
    tokens_ahead: int
    """Prompt tokens pending at admission, its own included (the estimate's sample)."""
    admitted_s: float
    queue_s: float
    _admission: Admission
    _prefilled: bool = False

    def first_token(self) -> None:
        if not self._prefilled:
            self._prefilled = True
            self._admission._prefill_done(self)


@dataclass
class Reservation:
    """A request between the cheap checks and ``slot()``: templated and tokenized, but
    neither streaming nor queued yet. It counts against the queue's room until
    ``slot()`` takes it over or it is released."""

    _admission: Admission
    _held: bool = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._admission._num_reserved -= 1


class _Rate:
    """Work per busy second, as an exponentially weighted average."""

    def __init__(self, alpha: float = 0.2) -> None:
        self.alpha = alpha
        self.value: float | None = None
        self.samples = 0

    def add(self, amount: float, seconds: float) -> None:
        if seconds <= 0:
            return
        rate = amount / seconds
        self.value = (
            rate if self.value is None else self.alpha * rate + (1 - self.alpha) * self.value
        )
        self.samples += 1


def _granted(future: asyncio.Future[None]) -> bool:
    return future.done() and not future.cancelled() and future.exception() is None


class Admission:
    def __init__(
        self, limits: AdmissionLimits, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = limits
        self._clock = clock
        self._active = 0
        self._queue: list[_Waiter] = []
        self._seq = itertools.count()
        self._pending_prefill = 0
        self._num_reserved = 0
        self.ttft_estimate = TTFTEstimate()
        self._last_release: float | None = None
        self.service_rate = _Rate()
        self.draining = False

    @property
    def num_active(self) -> int:
        return self._active

    @property
    def num_queued(self) -> int:
        return len(self._queue)

    @property
    def num_reserved(self) -> int:
        """Requests past the cheap checks, still being templated or tokenized."""
        return self._num_reserved

    def reserve(self) -> Reservation:
        """The cheap refusals, then a place held until ``slot(reservation=...)``.

        NOTE: without it every request of a burst passes ``check_capacity`` (none is
        queued until it reaches ``slot()``) and is tokenized before ``queue_full`` fires.
        """
        self.check_capacity()
        self._num_reserved += 1
        return Reservation(self)

    def retry_after_s(self) -> int:
        """Seconds until the queue ahead has likely drained, from the observed service rate."""
        rate = self.service_rate.value
        if not rate:
            return 1
        return max(1, min(120, math.ceil((self.num_queued + 1) / rate)))

    def _tokens_ahead(self, priority: int) -> int:
        queued = sum(w.prefill_tokens for w in self._queue if w.priority <= priority)
        return self._pending_prefill + queued

    def predicted_ttft_s(self, prefill_tokens: int, priority: int) -> float | None:
        if self.ttft_estimate.num_samples < self.limits.min_slo_samples:
            return None
        return self.ttft_estimate.predict_s(self._tokens_ahead(priority) + prefill_tokens)

    def update_limits(self, limits: AdmissionLimits) -> None:
        self.limits = limits
        self._wake()

    @asynccontextmanager
    async def slot(
        self,
        prefill_tokens: int,
        priority: int = 0,
        ttft_slo_s: float | None = None,
        reservation: Reservation | None = None,
    ) -> AsyncIterator[Ticket]:
        """Hold a stream slot for the body of the ``async with``."""
        arrival = self._clock()
        if reservation is not None:
            # Taken over here, in the same step that queues or admits the request.
            reservation.release()
        self._check_admissible(prefill_tokens, priority, ttft_slo_s)
        if self._active < self.limits.max_concurrent and not self._queue:
            self._active += 1
        else:
            await self._wait(prefill_tokens, priority)
        self._pending_prefill += prefill_tokens
        now = self._clock()
        ticket = Ticket(prefill_tokens, self._pending_prefill, now, now - arrival, self)
        try:
            yield ticket
        finally:
            if not ticket._prefilled:
                self._pending_prefill = max(0, self._pending_prefill - prefill_tokens)
            self._active -= 1
            self._record_release()
            self._wake()

    def _check_admissible(
        self, prefill_tokens: int, priority: int, ttft_slo_s: float | None
    ) -> None:
        self.check_capacity()
        if self.limits.slo_check and ttft_slo_s is not None and self._tokens_ahead(priority):
            predicted = self.predicted_ttft_s(prefill_tokens, priority)
            if predicted is not None and predicted > ttft_slo_s:
                raise AdmissionRejected(
                    "slo",
                    f"predicted time to first token {predicted:.1f} s exceeds the "
                    f"{ttft_slo_s:.1f} s objective",
                    self.retry_after_s(),
                )

    def check_capacity(self) -> None:
        """The cheap refusals (draining, concurrency, queue full), before any tokenizing.

        Reserved requests count as if queued: each will take a slot or a queue place.
        """
        if self.draining:
            raise AdmissionRejected(
                "draining", "the gateway is shutting down", self.retry_after_s()
            )
        occupied = self._active + len(self._queue) + self._num_reserved
        if occupied >= self.limits.max_concurrent or self._queue:
            if self.limits.max_queue == 0:
                raise AdmissionRejected("concurrency", "all streams are busy", self.retry_after_s())
            waiting = occupied - self.limits.max_concurrent
            if max(len(self._queue), waiting) >= self.limits.max_queue:
                raise AdmissionRejected(
                    "queue_full", "the wait queue is full", self.retry_after_s()
                )

    async def _wait(self, prefill_tokens: int, priority: int) -> None:
        """Queue until ``_wake`` reserves a slot for us (it counts it in ``_active``)."""
        waiter = _Waiter(
            priority, next(self._seq), prefill_tokens, asyncio.get_running_loop().create_future()
        )
        heapq.heappush(self._queue, waiter)
        try:
            done, _ = await asyncio.wait({waiter.future}, timeout=self.limits.max_queue_wait_s)
        except asyncio.CancelledError:
            # The client left while queued. NOTE: if a slot was reserved for it in
            # the meantime, hand that slot to the next waiter instead of leaking it.
            if _granted(waiter.future):
                self._active -= 1
                self._wake()
            else:
                self._drop(waiter)
                waiter.future.cancel()
            raise
        if not done:
            self._drop(waiter)
            waiter.future.cancel()
            raise AdmissionRejected(
                "queue_timeout", "no stream slot freed in time", self.retry_after_s()
            )
        waiter.future.result()  # raises the draining rejection, if that is what woke us

    def _drop(self, waiter: _Waiter) -> None:
        if waiter in self._queue:
            self._queue.remove(waiter)
            heapq.heapify(self._queue)

    def _wake(self) -> None:
        """Reserve free slots for the best waiters, in priority then arrival order."""
        while self._active < self.limits.max_concurrent and self._queue:
            waiter = heapq.heappop(self._queue)
            if not waiter.future.done():
                self._active += 1
                waiter.future.set_result(None)

    def reject_all_queued(self) -> None:
        """Draining: refuse new requests and every queued one at once."""
        self.draining = True
        while self._queue:
            waiter = heapq.heappop(self._queue)
            if not waiter.future.done():
                waiter.future.set_exception(
                    AdmissionRejected("draining", "the gateway is shutting down", 5)
                )

    # --- measurements ---

    def _prefill_done(self, ticket: Ticket) -> None:
        self.ttft_estimate.add(ticket.tokens_ahead, self._clock() - ticket.admitted_s)
        self._pending_prefill = max(0, self._pending_prefill - ticket.prefill_tokens)

    def _record_release(self) -> None:
        now = self._clock()
        if self._last_release is not None:
            self.service_rate.add(1, now - self._last_release)
        self._last_release = now
