"""The correction of the deadline plan's margin: the paper's proportional law, kept.

Pure Python. The margin ``m`` on a step's prefill increment is a high quantile of what
mixed steps took beyond the prediction (``slack_model``), times a proportional correction
``k`` that moves the share of deadline-bound steps ending past their deadline toward
``TARGET_OVERRUN_RATE``::

    m = quantile_q(...) * k
    k <- clamp(k * (1 + gain * CORRECTION_STEP * (overrun - TARGET_OVERRUN_RATE)), 1, 2)

with ``overrun`` 1 when the step ended after its deadline and 0 otherwise; at
equilibrium ``(1 - r) * ln(1 - g*s*r*) + r * ln(1 + g*s*(1 - r*)) = 0`` gives
an overrun rate ``r`` of about ``r*`` = 1%. The correction never goes below 1:
the quantile alone already aims at ``1 - q`` overruns, and a plant the model
predicts exactly gets none. It adds margin where overruns come in runs (a
slowdown the model has not caught up with).
"""

from __future__ import annotations

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
