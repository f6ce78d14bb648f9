"""What one request adds to the gateway's metrics and log: the one place a request is counted.

From its arrival to its end, a completion request passes through the lifecycle
(``lifecycle.py``: queued, admitted or refused) and, once in the engine, its
``MeasuredStream``; both tell this meter what happened, and only the meter writes the
request's metrics and its ``request_finished`` log line.

Latency is measured as a token leaves for the client: one TTFT sample at the first
content token, one ITL sample per later token (tokens that share one engine output count
as zero gaps), and the end-to-end time of a request that ended ``ok``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from engine_worker.contract.api import GenerationChunk
from gateway.admission import AdmissionRejected
from gateway.errors import outcome_of
from gateway.metrics import GatewayMetrics, Outcome
from gateway.objectives import Objectives
from gateway.tenant_meter import TenantMeter

logger = logging.getLogger("dlfp.request")


class RequestMeter:
    def __init__(
        self,
        metrics: GatewayMetrics,
        endpoint: str,
        arrival_s: float,
        tenant: TenantMeter | None = None,
    ) -> None:
        self._metrics = metrics
        self.endpoint = endpoint
        self._arrival_s = arrival_s
        self.tenant = tenant or TenantMeter()
        """What the request adds to its tenant's series and rates."""
        self.num_prompt_tokens: int | None = None
        """Set once the request is in the engine."""
        self._first_token_s: float | None = None
        self._last_token_s: dict[int, float] = {}
        self._num_generated: dict[int, int] = {}
        self.objectives: Objectives | None = None
        """What the request is judged by (``objectives.resolve``), once known."""
        self._num_gaps = 0
        self._num_late_gaps = 0
        """Gaps between tokens, and those over the ITL objective (counted once it is known)."""

    # --- before the engine ---

    @contextmanager
    def queued(self) -> Iterator[None]:
        """While the request waits for admission."""
        self._metrics.queued_requests.inc()
        try:
            yield
        finally:
            self._metrics.queued_requests.dec()

    def admitted(self, queue_s: float, num_slots: int) -> None:
        self._metrics.queue.observe(queue_s)
        self.tenant.admitted(queue_s, num_slots)

    def refused(self, exc: BaseException) -> None:
        """A request that never reached the engine: its outcome, once."""
        if isinstance(exc, AdmissionRejected):
            self._metrics.admission_rejections.labels(reason=exc.reason).inc()
        outcome = outcome_of(exc)
        self._metrics.requests.labels(endpoint=self.endpoint, outcome=outcome).inc()
        self.tenant.ended(outcome)

    # --- in the engine ---

    def submitted(self, num_prompt_tokens: int) -> None:
        self.num_prompt_tokens = num_prompt_tokens
        self._metrics.active_requests.inc()
        self._metrics.prompt_tokens.inc(num_prompt_tokens)
        self.tenant.prompt(num_prompt_tokens)

    @property
    def num_generated(self) -> int:
        return sum(self._num_generated.values())

    def observe(self, chunk: GenerationChunk, now: float) -> None:
        """Time the chunk's tokens as they leave."""
        metrics = self._metrics
        for choice in chunk.choices:
            n = len(choice.token_ids)
            if n == 0:
                continue
            previous = self._last_token_s.get(choice.index)
            if previous is not None:
                metrics.itl.observe(now - previous)
                self._gap(now - previous)
            elif self._first_token_s is None:
                self._first_token_s = now
                metrics.ttft.observe(now - self._arrival_s)
                self.tenant.first_token(now - self._arrival_s)
            for _ in range(n - 1):
                metrics.itl.observe(0.0)
                self._gap(0.0)
            self._last_token_s[choice.index] = now
            self._num_generated[choice.index] = self._num_generated.get(choice.index, 0) + n
            metrics.generation_tokens.inc(n)
            self.tenant.completion(n)

    def _gap(self, gap_s: float) -> None:
        self._num_gaps += 1
        self._num_late_gaps += self.objectives is not None and self.objectives.is_late(gap_s)

    def ended(self, outcome: Outcome, completion_id: str) -> None:
        """A request that reached the engine: its outcome, its latency and its log line."""
        metrics = self._metrics
        if self.num_prompt_tokens is not None:
            metrics.active_requests.dec()
        metrics.requests.labels(endpoint=self.endpoint, outcome=outcome).inc()
        self.tenant.ended(outcome)
        last = max(self._last_token_s.values(), default=None)
        if outcome == "ok" and last is not None:
            metrics.e2e.observe(last - self._arrival_s)
        ttft = None if self._first_token_s is None else self._first_token_s - self._arrival_s
        objectives = self.objectives
        if objectives is not None and outcome != "aborted":
            met = (
                outcome == "ok"
                and ttft is not None
                and objectives.met(ttft, self._num_gaps, self._num_late_gaps)
            )
            metrics.goodput.labels(source=objectives.source, met=str(met).lower()).inc()
        logger.info(
            "request finished",
            extra={
                "event": "request_finished",
                "completion_id": completion_id,
                "endpoint": self.endpoint,
                "tenant": self.tenant.name,
                "outcome": outcome,
                "prompt_tokens": self.num_prompt_tokens or 0,
                "completion_tokens": self.num_generated,
                "ttft_s": None if ttft is None else round(ttft, 4),
            },
        )
