"""A sliding window of the last values, kept sorted: its median and quantiles at once.

Pure Python, on the scheduler's hot path: each value costs a ``bisect.insort`` and, once
the window is full, the removal of the oldest; a quantile is one index. It serves the
cost model's speed factors and decode-step median, the deadline plan's margin, and the
host's share under ``observation: device``.

``quantile`` is the window's rank rule for any sorted values, so that a replay of the
controller reports its figures by the rule the controller reads.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Sequence


def quantile(ordered: Sequence[float], q: float, *, strictly_above: bool = False) -> float:
    """The ``q`` quantile (0 to 1) of sorted values by rank: always a value that was seen.

    By nearest rank, the smallest value with at least a ``q`` share of the values at or
    below it (the ``ceil(q * n)``-th smallest). With ``strictly_above``, the smallest value
    with *more* than a ``q`` share at or below it (the ``floor(q * n) + 1``-th smallest);
    the two differ only where ``q * n`` is whole. Needs a value.
    """
    n = len(ordered)
    rank = math.floor(q * n) if strictly_above else math.ceil(q * n) - 1
    return ordered[min(max(rank, 0), n - 1)]


class SlidingWindow:
    """The last ``capacity`` values."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("a window holds at least one value")
        self._capacity = capacity
        self._values: deque[float] = deque()
        self._sorted: list[float] = []

    @property
    def size(self) -> int:
        return len(self._values)

    def add(self, value: float) -> None:
        self._values.append(value)
        bisect.insort(self._sorted, value)
        if len(self._values) > self._capacity:
            self.drop_oldest()

    def drop_oldest(self) -> None:
        """Remove the oldest value; needs a value."""
        old = self._values.popleft()
        del self._sorted[bisect.bisect_left(self._sorted, old)]

    def median(self) -> float:
        """The median (the mean of the two middle values of an even count); needs a value."""
        values, middle = self._sorted, len(self._sorted) // 2
        return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2

    def quantile(self, q: float) -> float:
        """The ``q`` quantile by nearest rank (``quantile``); needs a value."""
        return quantile(self._sorted, q)

    def clear(self) -> None:
        self._values.clear()
        self._sorted.clear()
