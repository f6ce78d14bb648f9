"""The paper's proportional law (modes ``dlfp`` and ``dlfp-ct``), after each guarded cycle::

    cap <- clamp(quantise(cap * (1 + gain * (target - observed) / target)))

The law runs on an unquantised cap (``cap_exact``, clamped to the bounds) and only the
applied cap is quantised: quantising the state itself would trap the cap wherever one
update moves it by less than half a step. Under the target plan the same factor scales
the allowance instead (``target_plan``).

Units: ``observed`` and ``target`` in seconds, cap in prefill tokens. Sign: a step slower
than the target shrinks the cap, a faster one grows it; clamping after every update
also stops wind-up.
"""

from __future__ import annotations

from engine_worker.controller.modes import ControllerMode
from engine_worker.controller.params import MAX_ALLOWANCE, MIN_ALLOWANCE, CapParams
from engine_worker.controller.step_timing import StepRecord


def correction_factor(gain: float, target_s: float, observed_s: float) -> float:
    """``1 + gain * (target - observed) / target``: below 1 for a step slower than the target."""
    return 1.0 + gain * (target_s - observed_s) / target_s


def says_something(record: StepRecord, cap_tokens: int, observed_s: float) -> bool:
    """Whether a guarded mixed step informs its cap (or allowance).

    A step whose prefill did not fill its cap (a prompt's last chunk, say) was not
    limited by it: a fast one says nothing, while a slow one still does.
    """
    return record.num_prefill_tokens >= cap_tokens or observed_s > record.target_s


def next_cap_exact(params: CapParams, record: StepRecord, cap_tokens: int, factor: float) -> float:
    """The unquantised cap after the step, from the one it was scheduled with."""
    base = record.cap_exact if record.cap_exact is not None else float(cap_tokens)
    return min(max(base * factor, params.min_cap_tokens), params.max_cap_tokens)


def next_allowance(allowance: float, factor: float) -> float:
    """The target plan's allowance after a planned step, from the one it was scheduled with."""
    return min(max(allowance * factor, MIN_ALLOWANCE), MAX_ALLOWANCE)


class ProportionalLaw:
    """The state the law corrects: the cap (exact and quantised) and, under the target
    plan, the allowance, with the generation that tells a step's state from the one in
    force."""

    def __init__(self, starting_cap: int | None) -> None:
        self.cap_tokens = starting_cap
        self.cap_exact: float | None = starting_cap
        self.allowance = 1.0
        self.generation = 0
        self.reset_generation = 0
        """The cap generation the last reset started; older steps never count."""

    def reset(self, starting_cap: int | None) -> None:
        """Back to the starting cap and allowance; every step in flight becomes stale."""
        self.set_cap(starting_cap, force_new_generation=True)
        self.reset_generation = self.generation
        self.allowance = 1.0

    def set_cap(
        self,
        cap_tokens: int | None,
        *,
        exact: float | None = None,
        force_new_generation: bool = False,
    ) -> None:
        # NOTE: a new generation marks every in-flight step stale. An unchanged
        # cap keeps the generation: those steps still measure the cap in force.
        if force_new_generation or cap_tokens != self.cap_tokens:
            self.generation += 1
        self.cap_tokens = cap_tokens
        self.cap_exact = exact if exact is not None else cap_tokens

    def is_stale(self, record: StepRecord, mode: str) -> bool:
        """Whether a step was scheduled under a state whose effect must not feed back."""
        # NOTE: dlfp-ct credits each step to the state it was scheduled with (its cap
        # or allowance, on the record), so a step completed after a newer state was
        # issued still counts: with a batch queue step k+1 is always scheduled before
        # step k completes, and the paper's guard dropped every other observation.
        # Steps from before a reset or another mode never count.
        if mode == ControllerMode.DLFP_CT:
            stale = record.cap_generation < self.reset_generation
        else:
            stale = record.cap_generation != self.generation
        return stale or record.mode != mode

    def update(
        self, params: CapParams, record: StepRecord, cap_tokens: int, observed_s: float
    ) -> bool:
        """One guarded cycle; returns whether the step informed the cap or allowance."""
        if not says_something(record, cap_tokens, observed_s):
            return False
        factor = correction_factor(params.gain, record.target_s, observed_s)
        if record.is_planned:
            self.allowance = next_allowance(record.allowance, factor)
            self.generation += 1
        else:
            exact = next_cap_exact(params, record, cap_tokens, factor)
            self.set_cap(params.clamp(exact), exact=exact)
        return True
