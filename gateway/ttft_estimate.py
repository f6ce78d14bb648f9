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
faded estimate as no prefill time at all (only the wait for a slot remains), the next
requests are admitted, and their samples outweigh the old ones.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

FRESH_WEIGHT = 1.0
"""Sample weight (recent samples count about 1 each) an estimate needs to refuse."""


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
