"""The largest quantised cap whose predicted step fits a time budget: both plans' search.

The target plan and the deadline plan differ only in the budget a mixed step's predicted
time must fit; the search over the quantised caps is the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engine_worker.controller.cost_model import StepCostModel, StepShape, plan_prefill
from engine_worker.controller.params import CapParams


def fits_budget(
    model: StepCostModel,
    num_decoding: int,
    decode_context_tokens: int,
    candidates: Sequence[tuple[int, int]],
    budget_s: float,
) -> Callable[[int], bool]:
    """Whether a cap's step, serving ``candidates`` in order, is predicted within ``budget_s``."""

    def fits(cap: int) -> bool:
        num_prefill, attention = plan_prefill(candidates, cap)
        shape = StepShape(num_decoding, decode_context_tokens, num_prefill, attention)
        predicted_s = model.predict_s(shape)
        return predicted_s is not None and predicted_s <= budget_s

    return fits


def largest_fitting_cap(params: CapParams, fits: Callable[[int], bool]) -> int:
    """The largest ``min_cap_tokens + j * step_tokens`` within the bounds that fits
    (``min_cap_tokens`` when none does)."""
    # NOTE: the prediction never falls as the cap grows (the fit keeps every
    # slope >= 0, and a larger cap serves the same candidates more tokens), so
    # the largest cap that fits is found by bisection over the quantised caps:
    # a few predictions per step on the engine's hot path, not one per quantum.
    p = params
    low, high = 0, (p.max_cap_tokens - p.min_cap_tokens) // p.step_tokens
    while low < high:
        middle = (low + high + 1) // 2
        if fits(p.min_cap_tokens + middle * p.step_tokens):
            low = middle
        else:
            high = middle - 1
    return p.min_cap_tokens + low * p.step_tokens
