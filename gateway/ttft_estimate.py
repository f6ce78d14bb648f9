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
"""

from __future__ import annotations

import time
from collections.abc import Callable


class ServiceRate:
    """Slots freed per second while the gateway is full, an exponentially weighted average.

    NOTE: only releases with requests waiting count, each against the previous such
    release. An interval that spans an idle spell measures the clients, not the
    gateway, and would predict long waits, and refusals, right after it.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, alpha: float = 0.2) -> None:
        self.alpha = alpha
        self.value: float | None = None
        self.samples = 0
        self._clock = clock
        self._last_s: float | None = None

    def released(self, num_slots: int, saturated: bool) -> None:
        now = self._clock()
        if not saturated:
            self._last_s = None
            return
        if self._last_s is not None and now > self._last_s:
            self.add(num_slots, now - self._last_s)
        self._last_s = now

    def add(self, amount: float, seconds: float) -> None:
        if seconds <= 0:
            return
        rate = amount / seconds
        self.value = (
            rate if self.value is None else self.alpha * rate + (1 - self.alpha) * self.value
        )
        self.samples += 1


class TTFTEstimate:
    def __init__(self, alpha: float = 0.1, spread_tokens: float = 64.0) -> None:
        self.alpha = alpha
        self.spread_tokens = spread_tokens
        self.num_samples = 0
        self._w = self._x = self._y = self._xx = self._xy = 0.0

    def add(self, tokens: int, seconds: float) -> None:
        if seconds < 0 or tokens < 0:
            return
        keep = 1.0 - self.alpha
        x, y = float(tokens), seconds
        self._w = keep * self._w + 1.0
        self._x = keep * self._x + x
        self._y = keep * self._y + y
        self._xx = keep * self._xx + x * x
        self._xy = keep * self._xy + x * y
        self.num_samples += 1

    def _line(self) -> tuple[float, float]:
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
        return self._line()[0]

    @property
    def per_token_s(self) -> float:
        return self._line()[1]

    def predict_s(self, tokens: int) -> float:
        fixed, per_token = self._line()
        return fixed + per_token * tokens

    def tokens_per_s(self) -> float | None:
        per_token = self.per_token_s
        return 1.0 / per_token if per_token > 0 else None
