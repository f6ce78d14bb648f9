"""Admission control: a cap on concurrent streams, a bounded priority queue, and
an SLO check that turns away early a request that would miss its TTFT target.

Plain asyncio, no HTTP: ``async with admission.slot(...)`` waits for a slot or
raises ``AdmissionRejected``, which one exception handler maps to 429/503.

The TTFT prediction: a request's first token waits for the later of two things, its
slot and the prefill of the prompts ahead of it, and then for its own prefill::

    predicted = max(slot_wait, per_token * tokens_ahead) + fixed + per_token * own_tokens

The slot wait is the slots that must free before it fits (the weights of the active
requests and of those queued before it, against ``max_concurrent``) at the measured
rate slots free while the gateway is full (``ttft_estimate.ServiceRate``: by Little's
law, ``max_concurrent`` over the time requests admitted from the queue held their slots).
``fixed`` and ``per_token`` come from ``ttft_estimate.TTFTEstimate``; the tokens ahead
are what is left to prefill of the prompts admitted but not yet streaming (estimated in
``pending_prefill``, in the engine's order) plus the prompts queued before it. A
request is refused for the SLO on arrival, and a queued one as soon as its time waited
plus the prediction exceeds the objective (checked every ``SLO_RECHECK_S``);
``max_queue_wait_s`` stays the backstop. A request with nothing ahead of it is never
refused for the SLO: refusing it would help no one, and a refused prompt never adds
the sample that would correct the estimate. For the same reason, once the estimate's
samples have faded (no first token for about a minute), only the slot wait counts (and
the start-up fit's line, if there is one).

Until enough is measured (``min_slo_samples`` first tokens, ``ServiceRate``'s hold
times), the engine's start-up fit stands in (``ttft_estimate.StartupPrior``, set by the
app once the engine is up): a fresh gateway refuses a burst it cannot serve on arrival,
not after the requests have waited. Without a fit (``startup_fit_s`` 0) nothing is
refused for the SLO until it is measured.

An ``n``-choice request takes ``n`` slots (at most ``max_concurrent``): it streams
``n`` sequences, and the engine's work is theirs.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from gateway.fair_queue import Ahead, FairQueue, Waiter, uncount
from gateway.pending_prefill import PendingPrefills
from gateway.tenant_limits import TenantLimits
from gateway.ttft_estimate import ServiceRate, StartupPrior, TTFTEstimate

logger = logging.getLogger("dlfp.admission")

SLO_RECHECK_S = 0.25
"""How often a queued request's SLO prediction is checked again."""
NO_SLACK_SHARE = 0.5
"""Share of the engine's planned steps carrying no prefill or only a floor's (the decodes
left no slack) from which ``no_slack_check`` refuses a new request, while streams decode
and a prompt admitted before it, ahead of it in the engine's order, waits for prefill."""


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
    no_slack_check: bool = False
    """Refuse new requests (429 no_slack) while most of the controller's planned steps
    carry no prefill or only a floor's, streams decode, and admitted prompts that go
    first still wait for theirs. Off by default: it refuses prompts the engine would
    serve within their TTFT objective, which the SLO check admits."""
    slo_queue_check: bool = True
    """Also predict the wait for a slot, and refuse a queued request as soon as its wait
    so far plus its prediction exceeds ttft_slo_ms."""
    min_slo_samples: int = Field(default=4, ge=1)
    """Measured first tokens needed before the SLO check trusts its throughput."""
    max_client_queue_share: float = Field(default=0.5, gt=0, le=1)
    """Share of max_queue one client (its API key, or its address with no keys) may hold:
    its requests in flight (streaming, queued, or being templated, tokenized or vetted)
    are at most max_concurrent plus this share of max_queue."""
    max_client_pre_admission: int = Field(default=1, ge=1, le=1000)
    """A client's requests templated, tokenized or vetted at once; its others wait their
    turn, holding their queue places, so its work cannot delay another client's long (the
    tokenizer and the grammar vetter do one thing at a time: more gains a client nothing)."""
    pre_admission_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    """Longest from arrival to the end of templating, tokenizing and grammar vetting;
    past it the request is refused (429, pre_admission_timeout)."""

    def max_client_requests(self) -> int:
        return self.max_concurrent + max(
            1, math.floor(self.max_client_queue_share * self.max_queue)
        )


class AdmissionRejected(Exception):
    """Turned away; ``reason`` is a ``dlfp_admission_rejections_total`` label."""

    def __init__(self, reason: str, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after_s = retry_after_s


class ClientDisconnected(Exception):
    """The client went away before its request was admitted."""


@dataclass
class Ticket:
    """A held slot; call ``first_token()`` when the engine has produced its first token."""

    prefill_tokens: int
    tokens_ahead: int
    """Prompt tokens pending at admission before its first token, its own included
    (the estimate's sample; ``Admission._pending_before``)."""
    admitted_s: float
    queue_s: float
    _admission: Admission
    pending_key: int
    """Its place in ``Admission._pending`` until its first token."""
    measured: bool = True
    """Whether its first token is a sample of prefill time (not when a grammar compile
    or other non-prefill wait comes before it)."""
    _prefilled: bool = False

    def first_token(self) -> None:
        if not self._prefilled:
            self._prefilled = True
            self._admission._prefill_done(self)


@dataclass
class Reservation:
    """A request between the cheap checks and ``slot()``: templated and tokenized, but
    neither streaming nor queued yet. It counts against the queue's room, and against
    its client's requests in flight, until ``slot()`` takes it over (in the same step
    that counts it as queued or streaming, so there is no moment it is counted nowhere)
    or it is released."""

    _admission: Admission
    client: str = ""
    _held: bool = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._admission._num_reserved -= 1
            uncount(self._admission._reserved, self.client)


def _granted(future: asyncio.Future[None]) -> bool:
    return future.done() and not future.cancelled() and future.exception() is None


class Admission:
    def __init__(
        self,
        limits: AdmissionLimits,
        clock: Callable[[], float] = time.monotonic,
        tenant_limits: Callable[[str], TenantLimits | None] = lambda _: None,
        shortest_first: Callable[[], bool] = lambda: False,
    ) -> None:
        self.limits = limits
        self._shortest_first = shortest_first
        """Whether the engine serves the shortest remaining prefill first (capped steps
        under ``prefill_order=srpf``): a prompt then waits only for those with no more
        left than itself."""
        self._clock = clock
        self._active = 0
        self._queue = FairQueue(tenant_limits)
        self._seq = itertools.count()
        self._pending = PendingPrefills(clock())
        """The prompts admitted but not yet streaming, with what is left of each."""
        self._num_decoding = 0
        """Requests past their first token and still streaming."""
        self._num_reserved = 0
        self._reserved: Counter[str] = Counter()
        """Each client's requests in ``reserve()``'s hands."""
        self._held: Counter[str] = Counter()
        """Each client's requests streaming or queued."""
        self.ttft_estimate = TTFTEstimate(clock=clock)
        self.service_rate = ServiceRate()
        self.prior: StartupPrior | None = None
        """The engine's start-up fit, until measurements replace it."""
        self._max_tokens_streaming = 0
        """The ``max_tokens`` of the requests streaming, summed (for the prior's rate)."""
        self._prompt_tokens_streaming = 0
        """Their prompts' tokens, summed."""
        self.draining = False
        self.zero_prefill_share = 0.0
        """Of the engine's recent planned steps, the share that carried no prefill because
        the decodes left no slack (``telemetry.ZeroPrefillShare``)."""

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

    def reserve(self, client: str = "") -> Reservation:
        """The cheap refusals, then a place held until ``slot(reservation=...)``. A client
        (``auth.client_id``) has at most ``max_client_requests`` reserved, queued or
        streaming; past it, 429 ``client_share``.

        NOTE: without it every request of a burst passes ``check_capacity`` (none is
        queued until it reaches ``slot()``) and is tokenized before ``queue_full`` fires.
        """
        self.check_capacity()
        limit = self.limits.max_client_requests()
        if self._reserved[client] + self._held[client] >= limit:
            raise AdmissionRejected(
                "client_share",
                f"this client already has {limit} requests in flight "
                "(DLFP_MAX_CONCURRENT and DLFP_MAX_CLIENT_QUEUE_SHARE of the queue)",
                self.retry_after_s(),
            )
        self._num_reserved += 1
        self._reserved[client] += 1
        return Reservation(self, client)

    def _rate_measured(self) -> bool:
        return self.service_rate.value(self.limits.max_concurrent) is not None

    def slots_per_s(self) -> float | None:
        """Slots freed per second with every slot in use: measured, else the prior's."""
        max_concurrent = self.limits.max_concurrent
        measured = self.service_rate.value(max_concurrent)
        if measured is not None or self.prior is None:
            return measured
        num = max(1, sum(self._queue.client_streams.values()))
        return self.prior.slots_per_s(
            max_concurrent, self._max_tokens_streaming / num, self._prompt_tokens_streaming / num
        )

    def retry_after_s(self) -> int:
        """Seconds until the queue ahead has likely drained, from the service rate."""
        rate = self.slots_per_s()
        if not rate:
            return 1
        return max(1, min(120, math.ceil((self.num_queued + 1) / rate)))

    def _ahead(
        self, priority: int, waiter: Waiter | None = None, client: str = "", tenant: str = ""
    ) -> Ahead:
        """What is served before a new request (as things stand now), or before
        ``waiter``, in ``fair_queue``'s order."""
        if waiter is not None:
            return self._queue.ahead(waiter.tenant, waiter.priority, waiter.client, waiter)
        return self._queue.ahead(tenant, priority, client)

    def _line(self) -> tuple[float, float] | None:
        """The TTFT line in force (fixed seconds, seconds per token): the measured one
        while fresh, else the start-up fit's; None before either."""
        estimate = self.ttft_estimate
        if estimate.num_samples >= self.limits.min_slo_samples and estimate.is_fresh:
            return estimate.line()
        if self.prior is not None:
            return self.prior.fixed_s, self.prior.per_token_s
        return None

    def _prefill_tokens_per_s(self) -> float | None:
        """The rate the pending prompts are taken to be prefilled at: one over the line's
        time per token, never faster than the start-up fit's lone prefill; None (no
        progress counted) without a start-up fit.

        NOTE: the measured line's slope is shrunk toward 0 while its samples are of
        nearly one size (``TTFTEstimate``); as a rate, that would count every pending
        prompt done at once. The start-up fit bounds it."""
        line = self._line()
        if self.prior is None or line is None:
            return None
        per_token_s = max(line[1], self.prior.per_token_s)
        return 1.0 / per_token_s if per_token_s > 0 else None

    def _pending_now(self) -> PendingPrefills:
        """The pending prompts, with the prefill done since the last look counted."""
        rate = self._prefill_tokens_per_s()
        self._pending.advance(self._clock(), rate, self._shortest_first())
        return self._pending

    def _pending_before(self, prefill_tokens: int) -> int:
        """The admitted prompts' tokens still to prefill before a prompt of
        ``prefill_tokens`` gets its own (``PendingPrefills.tokens_before``)."""
        return self._pending_now().tokens_before(prefill_tokens, self._shortest_first())

    def _tokens_ahead(self, ahead: Ahead, prefill_tokens: int) -> int:
        return self._pending_before(prefill_tokens) + ahead.prefill_tokens

    def _slot_wait_s(self, num_slots: int, ahead: Ahead) -> float:
        """Seconds until ``num_slots`` are free for a request behind ``ahead``."""
        needed = self._active + ahead.num_slots + num_slots
        needed -= self.limits.max_concurrent
        if needed <= 0:
            return 0.0
        rate = self.slots_per_s()
        # NOTE: no hold times measured yet and no prior: no wait is predicted, so nothing
        # is refused for a wait the gateway knows nothing of.
        return needed / rate if rate else 0.0

    def predicted_ttft_s(
        self,
        prefill_tokens: int,
        priority: int,
        num_slots: int = 1,
        waiter: Waiter | None = None,
        client: str = "",
        tenant: str = "",
    ) -> float | None:
        """The slot wait plus admission to first token; before enough is measured, from
        the prior, and None without one. Once the samples have faded
        (``TTFTEstimate.is_fresh``), the prior's line, or the slot wait alone."""
        estimate = self.ttft_estimate
        if estimate.num_samples < self.limits.min_slo_samples and self.prior is None:
            return None
        ahead = self._ahead(priority, waiter, client, tenant)
        wait_s = self._slot_wait_s(num_slots, ahead) if self.limits.slo_queue_check else 0.0
        line = self._line()
        if line is None:
            return wait_s
        fixed_s, per_token_s = line
        prefill_ahead_s = per_token_s * self._tokens_ahead(ahead, prefill_tokens)
        # NOTE: the prompts ahead are prefilled while this one waits for its slot, so its
        # first token waits for the later of the two, not their sum: adding them refused
        # half of a burst the gateway served within the objective.
        return max(wait_s, prefill_ahead_s) + fixed_s + per_token_s * prefill_tokens

    def update_limits(self, limits: AdmissionLimits) -> None:
        self.limits = limits
        self._wake()

    def tenant_limits_changed(self) -> None:
        """A tenant's weight or caps changed: hand out any slots that frees."""
        self._wake()

    @asynccontextmanager
    async def slot(
        self,
        prefill_tokens: int,
        priority: int = 0,
        ttft_slo_s: float | None = None,
        reservation: Reservation | None = None,
        num_slots: int = 1,
        measured: bool = True,
        client: str = "",
        max_tokens: int = 1,
        tenant: str = "",
    ) -> AsyncIterator[Ticket]:
        """Hold ``num_slots`` stream slots for the body of the ``async with``. Queued,
        it waits in ``fair_queue``'s order."""
        arrival = self._clock()
        if reservation is not None:
            # Taken over here, in the same step that queues or admits the request.
            reservation.release()
        num_slots = max(1, min(num_slots, self.limits.max_concurrent))
        self._check_admissible(prefill_tokens, priority, ttft_slo_s, num_slots, client, tenant)
        queue = self._queue
        queued = (
            bool(queue)
            or not self._fits(num_slots)
            or queue.at_cap(tenant, num_slots)
            or self._held_back(tenant, num_slots)
        )
        if not queued:
            queue.seen(tenant, arrival)
            self._active += num_slots
            queue.hold(client, tenant, num_slots)
            self._held[client] += 1
        else:
            self._check_tenant_queue(tenant)
            queue.seen(tenant, arrival)
            waiter = Waiter(
                priority,
                next(self._seq),
                prefill_tokens,
                asyncio.get_running_loop().create_future(),
                num_slots,
                arrival,
                ttft_slo_s,
                client,
                tenant,
            )
            self._held[client] += 1
            try:
                await self._wait(waiter)
            except BaseException:
                uncount(self._held, client)
                raise
        pending_key = self._pending_now().add(prefill_tokens)
        self._max_tokens_streaming += max_tokens
        self._prompt_tokens_streaming += prefill_tokens
        now = self._clock()
        ticket = Ticket(
            prefill_tokens,
            self._pending_before(prefill_tokens),
            now,
            now - arrival,
            self,
            pending_key,
            measured,
        )
        try:
            yield ticket
        finally:
            if ticket._prefilled:
                self._num_decoding -= 1
            self._pending_now().remove(pending_key)  # NOTE: a second removal is harmless
            self._active -= num_slots
            self._max_tokens_streaming -= max_tokens
            self._prompt_tokens_streaming -= prefill_tokens
            queue.release(client, tenant, num_slots)
            uncount(self._held, client)
            # NOTE: while the prior stands in for the rate, every release is a sample:
            # a prior that refused every request that would queue would never be
            # replaced by samples of queued ones alone.
            learn = queued or (self.prior is not None and not self._rate_measured())
            self.service_rate.released(num_slots, self._clock() - ticket.admitted_s, learn)
            self._wake()

    def num_held(self, client: str) -> int:
        """The client's requests streaming or queued."""
        return self._held[client]

    def num_streaming(self, client: str) -> int:
        """The client's requests holding slots."""
        return self._queue.client_streams[client]

    def tenant_use(self, tenant: str) -> tuple[int, int]:
        """The tenant's slots held and requests queued."""
        return self._queue.tenant_slots[tenant], self._queue.num_queued(tenant)

    def num_reserved_by(self, client: str) -> int:
        """The client's requests between ``reserve()`` and ``slot()``."""
        return self._reserved[client]

    def _held_back(self, tenant: str, num_slots: int) -> bool:
        max_concurrent = self.limits.max_concurrent
        free = max_concurrent - self._active
        return self._queue.held_back(tenant, num_slots, free, max_concurrent, self._clock())

    def _fits(self, num_slots: int) -> bool:
        return self._active == 0 or self._active + num_slots <= self.limits.max_concurrent

    def _slo_refusal(
        self, predicted_s: float, ttft_slo_s: float, waited_s: float = 0.0
    ) -> AdmissionRejected:
        logger.info(
            "refused for the TTFT objective",
            extra={
                "event": "slo_refusal",
                "waited_s": round(waited_s, 3),
                "predicted_s": round(predicted_s, 3),
                "ttft_slo_s": ttft_slo_s,
                "num_active": self._active,
                "num_queued": len(self._queue),
                "pending_prefill_tokens": self._pending_now().total_tokens(),
                "slots_per_s": self.slots_per_s(),
                "prior_rate": self.prior is not None and not self._rate_measured(),
            },
        )
        return AdmissionRejected(
            "slo",
            f"predicted time to first token {predicted_s:.1f} s exceeds the "
            f"{ttft_slo_s:.1f} s objective",
            self.retry_after_s(),
        )

    def _check_admissible(
        self,
        prefill_tokens: int,
        priority: int,
        ttft_slo_s: float | None,
        num_slots: int,
        client: str = "",
        tenant: str = "",
    ) -> None:
        self.check_capacity()
        if not self.limits.slo_check or ttft_slo_s is None:
            return
        is_behind = self._pending_now().num_before(prefill_tokens, self._shortest_first()) > 0
        if (
            self.limits.no_slack_check
            and is_behind
            and self._num_decoding
            and self.zero_prefill_share >= NO_SLACK_SHARE
        ):
            # NOTE: the engine already holds admitted prompts back for want of slack; one
            # more only waits behind them. Nothing ahead in the engine's order (under
            # shortest-first, a chat beside documents): never refused (as below). No
            # stream decoding: the share is of steps past (a burst after a lull), and
            # nothing holds the prompts back now.
            logger.info(
                "refused: the decodes leave no slack for prefill",
                extra={
                    "event": "no_slack_refusal",
                    "zero_prefill_share": round(self.zero_prefill_share, 3),
                    "pending_prefill_tokens": self._pending_now().total_tokens(),
                },
            )
            raise AdmissionRejected(
                "no_slack",
                "the streams already decoding leave no time for another prompt's prefill "
                "within their inter-token objective",
                self.retry_after_s(),
            )
        if is_behind or not self._fits(num_slots) or self._queue:
            predicted = self.predicted_ttft_s(
                prefill_tokens, priority, num_slots, client=client, tenant=tenant
            )
            if predicted is not None and predicted > ttft_slo_s:
                raise self._slo_refusal(predicted, ttft_slo_s)

    def _slo_lost(self, waiter: Waiter) -> AdmissionRejected | None:
        """The refusal of a queued request whose wait so far plus its predicted TTFT
        exceeds its objective; None while it may still make it."""
        slo_s = waiter.ttft_slo_s
        if not (self.limits.slo_check and self.limits.slo_queue_check) or slo_s is None:
            return None
        predicted = self.predicted_ttft_s(
            waiter.prefill_tokens, waiter.priority, waiter.num_slots, waiter
        )
        if predicted is None:
            return None
        waited = self._clock() - waiter.arrival_s
        total = waited + predicted
        return self._slo_refusal(total, slo_s, waited) if total > slo_s else None

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

    def _check_tenant_queue(self, tenant: str) -> None:
        cap = self._queue.limits(tenant).max_queued
        if cap is not None and self._queue.num_queued(tenant) >= cap:
            raise AdmissionRejected(
                "tenant_max_queued",
                f"tenant {tenant!r} already has {cap} requests queued (its max_queued)",
                self.retry_after_s(),
            )

    async def _wait(self, waiter: Waiter) -> None:
        """Queue until ``_wake`` reserves our slots (it counts them in ``_active``), the
        SLO is lost, or ``max_queue_wait_s`` passes."""
        self._queue.append(waiter)
        self._wake()  # slots may be free while every tenant queued before it is at its cap
        deadline = waiter.arrival_s + self.limits.max_queue_wait_s
        try:
            while True:
                timeout = min(SLO_RECHECK_S, max(0.0, deadline - self._clock()))
                done, _ = await asyncio.wait({waiter.future}, timeout=timeout)
                if done:
                    break
                if self._active < self.limits.max_concurrent:
                    self._wake()  # a slot held back for a tenant no longer active
                    if waiter.future.done():
                        break
                if self._clock() >= deadline:
                    self._give_up(waiter)
                    raise AdmissionRejected(
                        "queue_timeout", "no stream slot freed in time", self.retry_after_s()
                    )
                if (refusal := self._slo_lost(waiter)) is not None:
                    self._give_up(waiter)
                    raise refusal
        except asyncio.CancelledError:
            # The client left while queued. NOTE: if a slot was reserved for it in
            # the meantime, hand that slot to the next waiter instead of leaking it.
            if _granted(waiter.future):
                self._active -= waiter.num_slots
                self._queue.release(waiter.client, waiter.tenant, waiter.num_slots)
                self._wake()
            else:
                self._give_up(waiter)
            raise
        waiter.future.result()  # raises the draining rejection, if that is what woke us

    def _give_up(self, waiter: Waiter) -> None:
        self._queue.remove(waiter)
        waiter.future.cancel()
        self._wake()  # a heavy request leaving the head may let lighter ones in

    def _wake(self) -> None:
        """Reserve free slots for the best waiters, in ``_order``."""
        while self._queue and self._active < self.limits.max_concurrent:
            waiter = self._queue.next_waiter()
            if waiter is None or not self._fits(waiter.num_slots):
                return
            if self._held_back(waiter.tenant, waiter.num_slots):
                return
            self._queue.remove(waiter)
            self._active += waiter.num_slots
            self._queue.hold(waiter.client, waiter.tenant, waiter.num_slots)
            waiter.future.set_result(None)

    def reject_all_queued(self) -> None:
        """Draining: refuse new requests and every queued one at once."""
        self.draining = True
        queued = list(self._queue)
        for waiter in queued:
            self._queue.remove(waiter)
            if not waiter.future.done():
                waiter.future.set_exception(
                    AdmissionRejected("draining", "the gateway is shutting down", 5)
                )

    # --- measurements ---

    def _prefill_done(self, ticket: Ticket) -> None:
        self._num_decoding += 1  # first: ``Ticket._prefilled`` is set, release undoes it
        pending = self._pending_now()  # the progress so far, at the line it was made at
        if ticket.measured:
            self.ttft_estimate.add(ticket.tokens_ahead, self._clock() - ticket.admitted_s)
        pending.remove(ticket.pending_key)
