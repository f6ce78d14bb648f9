"""The target plan (``plan: target``): feed-forward from the cost model, for ``dlfp-ct``.

Once the cost model is ready, each mixed step gets the largest cap whose *predicted*
busy time, for the prefills it would serve in order, fits ``allowance * target``::

    cap(k) = max{c in [min, max], c = j * step : predict(shape(c)) <= allowance * target}
    allowance <- clamp(allowance * (1 + gain * (target - observed) / target), 0.25, 2)

so the proportional law corrects the prediction's error instead of carrying the whole
plant, and a new prompt starts at the cap predicted for its context rather than at the
cap the last long prompt left. The proportional law corrects the allowance
(``proportional.ProportionalLaw``).
"""

from __future__ import annotations

from collections.abc import Sequence

from engine_worker.controller.cap_search import fits_budget, largest_fitting_cap
from engine_worker.controller.cost_model import StepCostModel
from engine_worker.controller.params import (
    AUTO_TARGET_DECODE_MULTIPLE,
    AUTO_TARGET_SLO_FRACTION,
    CapParams,
)


def plan_target_cap(
    params: CapParams,
    model: StepCostModel,
    budget_s: float,
    num_decoding: int,
    decode_context_tokens: int,
    candidates: Sequence[tuple[int, int]],
) -> int:
    """The largest cap whose predicted step fits ``budget_s`` (``allowance * target``)."""
    fits = fits_budget(model, num_decoding, decode_context_tokens, candidates, budget_s)
    return largest_fitting_cap(params, fits)


def resolve_target_s(
    params: CapParams, model: StepCostModel, num_decoding: int, decode_context_tokens: int
) -> float:
    """The target for a step with these decodes, s: the set one, or the ``auto`` rule (the
    larger of a share of the ITL objective and a multiple of the decode-only step)."""
    if params.set_target_ms is not None:
        return params.set_target_ms / 1000.0
    target_s = AUTO_TARGET_SLO_FRACTION * params.itl_slo_ms / 1000.0
    decode_s = model.recent_decode_only_s()
    if decode_s is not None and num_decoding > 0:
        target_s = max(target_s, AUTO_TARGET_DECODE_MULTIPLE * decode_s)
    return target_s
