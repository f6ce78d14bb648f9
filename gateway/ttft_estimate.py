"""The admission estimate of a request's time to first token: the wait for a slot
(``ServiceRate``) and the time from admission to first token (``TTFTEstimate``).

``TTFT = fixed_s + per_token_s * tokens``, where ``tokens`` is the prompt work ahead
of a request at admission plus its own prompt. Each sample is one request: those
tokens, and the seconds from its admission to its first token. An exponentially
weighted least-squares line through the samples separates the fixed per-request
latency (the intercept: scheduling, the first decode, the network) from the
per-token prefill time (the slope). Dividing tokens by seconds instead counts the
fixed latency as prefill time, and after short chats predicts a long prompt
many times too slow.

The slope is shrunk toward zero (ridge) by ``spread_tokens``: samples of nearly one
size say nothing about the time per token, and the estimate then calls their time
fixed, refusing nothing for its length alone until longer prompts are measured.

The samples also fade with age, at a half-life of ``half_life_s``, and the estimate is
``is_fresh`` only while their weight adds up to at least ``FRESH_WEIGHT`` samples. A
refused request adds no sample, so an estimate learnt in a slow spell (prefills held by
the scheduler behind tight ITL deadlines took 40 to 60 s to a first token) would otherwise
refuse every contended request long after the engine got fast again. Admission counts a
faded estimate as no prefill time of its own (the start-up fit's, if any, or only the
wait for a slot), the next requests are admitted, and their samples outweigh the old
ones.

Before anything is measured, ``StartupPrior`` stands in for both: the engine fits its
step-cost model to a workload of its own before ``/ready`` turns 200
(``engine_worker.client.startup_fit``), so a fresh gateway knows what a prefill token and a
decode step cost. Measured values take over as they come.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine_worker.controller.cost_model import NUM_FEATURES

FRESH_WEIGHT = 1.0
"""Sample weight (recent samples count about 1 each) an estimate needs to refuse."""


MAX_TOKENS_DISCOUNT = 0.5
"""Until hold times are measured, a request is expected to generate this share of its
``max_tokens``: most answers end before their limit, and a prior that assumed every
request ran to it would refuse a fresh gateway's burst for waits it will not have."""


@dataclass(frozen=True)
class StartupPrior:
    """The engine's costs from its start-up fit, for the SLO check before any request of
    the gateway's own has been measured.

    A first token is predicted as one mixed step (``fixed_s``) plus ``per_token_s`` for
    each prompt token ahead and its own; a slot frees after ``MAX_TOKENS_DISCOUNT`` of
    the holders' ``max_tokens`` in decode steps of a full gateway, whose context is the
    streaming prompts and half the output expected. The fit's attention term is left
    out (its prompts' contexts are not known ahead), and so is the prefill the
    controller holds back while streams decode: its prefill errs fast under load. Its
    slot wait errs slow where ``max_tokens`` is large and answers short. The measured
    estimate and rate replace it within a few requests."""

    fixed_s: float
    per_token_s: float
    decode_base_s: float
    """A decode-only step's own time."""
    decode_per_stream_s: float
    """What each decoding stream adds to a step."""
    decode_per_context_s: float = 0.0
    """What each token of context the decodes attend to adds to a step."""

    @classmethod
    def from_coefficients(cls, coefficients: Sequence[float]) -> StartupPrior | None:
        """From ``cost_model.CostModel.coefficients`` (seconds per feature unit, in its
        order: decode-only and mixed intercepts, per decode, per 1e4 decode context, per
        1e3 prefill, per 1e6 attention); None if the fit is missing or says nothing."""
        if len(coefficients) != NUM_FEATURES:
            return None
        decode_base, mixed_base, per_decode, per_10k_context, per_1k_prefill, _ = coefficients
        prior = cls(
            fixed_s=max(0.0, mixed_base) + max(0.0, per_decode),
            per_token_s=max(0.0, per_1k_prefill) / 1e3,
            decode_base_s=max(0.0, decode_base),
            decode_per_stream_s=max(0.0, per_decode),
            decode_per_context_s=max(0.0, per_10k_context) / 1e4,
        )
        # NOTE: a fit may put a decode step's whole cost in its context term.
        return prior if prior.per_token_s > 0 and prior.step_s(1, 1_000) > 0 else None

    def step_s(self, num_streams: int, context_tokens: float) -> float:
        """A decode-only step's time with ``num_streams`` decoding over ``context_tokens``."""
        return (
            self.decode_base_s
            + self.decode_per_stream_s * num_streams
            + self.decode_per_context_s * context_tokens
        )

    def slots_per_s(
        self, max_concurrent: int, mean_max_tokens: float, mean_prompt_tokens: float
    ) -> float:
        """Slots freed per second with ``max_concurrent`` streaming, as ``ServiceRate``."""
        num_steps = MAX_TOKENS_DISCOUNT * max(1.0, mean_max_tokens)
        context = max_concurrent * (mean_prompt_tokens + num_steps / 2)
        return max_concurrent / (num_steps * self.step_s(max_concurrent, context))


class ServiceRate:
    """Slots freed per second while the gateway is full, by Little's law: with every slot
    in use, slots free at ``max_concurrent`` over the mean time a slot is held.

    The hold times are those of the last ``window`` requests admitted from the queue,
    that is into a full gateway, weighted by their slots.

    NOTE: counting releases over a window measured a burst's start, when its first
    streams finish one by one as the engine works through their prefills: about 3.5
    slots a second where the burst drained at 5, and the wait forecast from it refused
    requests the gateway would have served within the objective. The hold times are
    kept across idle spells: they describe the load, not the clients' pace.
    """

    def __init__(self, window: int = 32, min_samples: int = 8) -> None:
        self.min_samples = min_samples
        self._held: deque[tuple[float, int]] = deque(maxlen=window)

    def released(self, num_slots: int, held_s: float, queued: bool) -> None:
        """A request that held ``num_slots`` for ``held_s``; only those admitted from
        the queue (``queued``) count."""
        if queued and held_s >= 0:
            self._held.append((held_s, num_slots))

    def value(self, max_concurrent: int) -> float | None:
        """Slots per second with ``max_concurrent`` in use; None until enough is measured."""
        if len(self._held) < self.min_samples:
            return None
        slots = sum(n for _, n in self._held)
        mean_held_s = sum(s * n for s, n in self._held) / slots
        return max_concurrent / mean_held_s if mean_held_s > 0 else None


class TTFTEstimate:
    def __init__(
        self,
        alpha: float = 0.1,
        spread_tokens: float = 64.0,
        half_life_s: float = 20.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.alpha = alpha
        self.spread_tokens = spread_tokens
        self.half_life_s = half_life_s
        self.num_samples = 0
        self._clock = clock
        self._w = self._x = self._y = self._xx = self._xy = 0.0
        self._updated_s = clock()

    def _fade(self, now_s: float) -> float:
        """The factor the samples' weight has lost since the last one."""
        age_s = max(0.0, now_s - self._updated_s)
        return math.exp(-math.log(2.0) * age_s / self.half_life_s)

    @property
    def is_fresh(self) -> bool:
        """Whether recent samples weigh at least ``FRESH_WEIGHT``."""
        return self._w * self._fade(self._clock()) >= FRESH_WEIGHT

    def add(self, tokens: int, seconds: float) -> None:
        if seconds < 0 or tokens < 0:
            return
        now_s = self._clock()
        keep = (1.0 - self.alpha) * self._fade(now_s)
        self._updated_s = now_s
        x, y = float(tokens), seconds
        self._w = keep * self._w + 1.0
        self._x = keep * self._x + x
        self._y = keep * self._y + y
        self._xx = keep * self._xx + x * x
        self._xy = keep * self._xy + x * y
        self.num_samples += 1

    def line(self) -> tuple[float, float]:
        """The fixed seconds and the seconds per token."""
        if self._w == 0:
            return 0.0, 0.0
        mean_x, mean_y = self._x / self._w, self._y / self._w
        variance = max(0.0, self._xx / self._w - mean_x * mean_x)
        covariance = self._xy / self._w - mean_x * mean_y
        slope = max(0.0, covariance / (variance + self.spread_tokens**2))
        intercept = mean_y - slope * mean_x
        if intercept < 0:  # NOTE: no negative fixed latency; then all time is per token
            return 0.0, mean_y / mean_x if mean_x > 0 else 0.0
        return intercept, slope

    @property
    def fixed_s(self) -> float:
        return self.line()[0]

    @property
    def per_token_s(self) -> float:
        return self.line()[1]

    def tokens_per_s(self) -> float | None:
        per_token = self.per_token_s
        return 1.0 / per_token if per_token > 0 else None
