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
from collections import deque
from collections.abc import Callable


class ServiceRate:
    """Slots freed per second while the gateway is full: the slots released in the last
    ``window_s`` of a busy spell over the time they took, up to now.

    NOTE: only releases with requests waiting count, and a spell starts again after the
    queue empties: an interval that spans an idle spell measures the clients, not the
    gateway. Streams admitted together finish together, so rates between consecutive
    releases swing from huge to tiny; a count over a window, ending now, does not.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, window_s: float = 30.0) -> None:
        self.window_s = window_s
        self.samples = 0
        self._clock = clock
        self._origin_s: float | None = None
        self._releases: deque[tuple[float, int]] = deque()

    def released(self, num_slots: int, saturated: bool) -> None:
        now = self._clock()
        if not saturated:
            self._origin_s = None
            self._releases.clear()
            return
        if self._origin_s is None:
            self._origin_s = now  # the first release of a spell only starts the clock
            return
        self._releases.append((now, num_slots))
        self.samples += 1

    @property
    def value(self) -> float | None:
        if self._origin_s is None or not self._releases:
            return None
        now = self._clock()
        start = max(self._origin_s, now - self.window_s)
        while self._releases and self._releases[0][0] < start:
            self._releases.popleft()
        if not self._releases or now <= start:
            return None
        return sum(n for _, n in self._releases) / (now - start)


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
