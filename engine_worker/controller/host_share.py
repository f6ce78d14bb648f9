"""The host's share of a step under ``observation: device``: what a stream waits beyond it.

Pure Python. The cost model then fits device time, while a stream waits the
completion interval, device time plus the host's work around it (scheduling,
input preparation, output processing, the trip to and from the worker). The
deadline plan adds a high quantile of that share to each prediction::

    host(k)   = max(completion_interval(k) - device(k), 0)
    predicted_completion = predict(shape) + quantile_q(host, last HOST_WINDOW_STEPS steps)

A quantile rather than the mean: a stream fails on its worst gap. The share is
taken from every completed step that has both times, decode-only steps included
(the host's work barely depends on the prefill); before any, it is 0.
"""

from __future__ import annotations

import math

from engine_worker.controller.sliding_window import SlidingWindow

HOST_WINDOW_STEPS = 128
"""Steps whose host share the quantile is taken over."""
HOST_QUANTILE = 0.9
"""The quantile of the host share the deadline plan adds."""


class HostShareWindow:
    """The last ``HOST_WINDOW_STEPS`` host shares (seconds)."""

    def __init__(self, quantile: float = HOST_QUANTILE, capacity: int = HOST_WINDOW_STEPS) -> None:
        if not 0 < quantile <= 1:
            raise ValueError("need 0 < quantile <= 1")
        self._quantile = quantile
        self._shares = SlidingWindow(capacity)

    @property
    def num_samples(self) -> int:
        return self._shares.size

    def observe(self, completion_s: float, device_s: float) -> None:
        share = completion_s - device_s
        if math.isfinite(share):
            self._shares.add(max(share, 0.0))

    def value_s(self) -> float:
        """The ``quantile`` of the window (nearest rank), 0 while it is empty."""
        return self._shares.quantile(self._quantile) if self._shares.size else 0.0

    def reset(self) -> None:
        self._shares.clear()
