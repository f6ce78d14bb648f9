"""The deadline plan's margin for the tail: how much longer than predicted a step may run.

Pure Python. A mixed step is planned so that its prediction times the margin
``m`` meets the tightest stream deadline. ``m`` is a high quantile of
observed/predicted over the recent mixed steps (the model's error where it
hurts: the tail), times a proportional correction that moves the share of
steps ending past their deadline toward ``TARGET_OVERRUN_RATE``::

    m = quantile_q(observed / predicted over the last 128 mixed steps) * k
    k <- clamp(k * (1 + gain * CORRECTION_STEP * (overrun - TARGET_OVERRUN_RATE)), 1, 2)

with ``overrun`` 1 when the step ended after its deadline and 0 otherwise; at
equilibrium ``(1 - r) * ln(1 - g*s*r*) + r * ln(1 + g*s*(1 - r*)) = 0`` gives
an overrun rate ``r`` of about ``r*`` = 1%. The correction never goes below 1:
the quantile alone already aims at ``1 - q`` overruns, and a plant the model
predicts exactly gets none. It adds margin where overruns come in runs (a
slowdown the model has not caught up with). Until ``MIN_MARGIN_SAMPLES``
steps were seen the quantile is ``STARTING_MARGIN``.
"""

from __future__ import annotations

import math

from engine_worker.controller.sliding_window import SlidingWindow

MARGIN_WINDOW_STEPS = 128
"""Mixed steps whose observed/predicted ratio the quantile is taken over."""
MIN_MARGIN_SAMPLES = 16
STARTING_MARGIN = 1.5
"""The quantile before ``MIN_MARGIN_SAMPLES`` ratios exist."""
TARGET_OVERRUN_RATE = 0.01
"""Share of deadline-bound mixed steps the correction lets end past their deadline."""
CORRECTION_STEP = 0.1
"""Share of the gain one overrun (or one step within its deadline) moves the correction by."""
MIN_CORRECTION = 1.0
MAX_CORRECTION = 2.0


def corrected(correction: float, overrun: bool, gain: float) -> float:
    """The proportional law on the correction after one deadline-bound step."""
    error = (1.0 if overrun else 0.0) - TARGET_OVERRUN_RATE
    value = correction * (1.0 + gain * CORRECTION_STEP * error)
    return min(max(value, MIN_CORRECTION), MAX_CORRECTION)


class MarginWindow:
    """The last ``MARGIN_WINDOW_STEPS`` observed/predicted ratios."""

    def __init__(self, quantile: float, capacity: int = MARGIN_WINDOW_STEPS) -> None:
        self.quantile = quantile
        self._ratios = SlidingWindow(capacity)

    @property
    def num_samples(self) -> int:
        return self._ratios.size

    def observe(self, ratio: float) -> None:
        if math.isfinite(ratio) and ratio > 0:
            self._ratios.add(ratio)

    def value(self) -> float:
        """The ``quantile`` of the window (nearest rank), or ``STARTING_MARGIN``."""
        if self._ratios.size < MIN_MARGIN_SAMPLES:
            return STARTING_MARGIN
        return self._ratios.quantile(self.quantile)

    def reset(self) -> None:
        self._ratios.clear()
