"""The deadline plan's aim below its objective, and the correction of its margin: the
paper's proportional law, kept.

Pure Python. The streams' objective is a ``q`` quantile of their gaps, so it allows a
``1 - q`` share of late steps. The plan aims at ``OVERRUN_AIM`` of that share. Its tails
(``slack_model``: the decodes' ``q_D`` and the increment's margin ``m``) are taken at
the quantile ``planned_quantile(q) = 1 - OVERRUN_AIM * (1 - q)``: 0.995 at ``q`` = 0.99,
which on a window of 128 ratios is its largest by nearest rank (at 0.99, its second
largest). A new ratio exceeds a window's largest about 1 time in 129 (0.8%) and its
second largest about 2 in 129 (1.6%), so the quantile alone does not hold the aim; and
a window's largest is set by one rare event (a slow decode step, a slow spell) for as
long as it stays in the window, while the two tails add, so at other times it holds far
more than the aim. A proportional correction ``k`` on the margin moves the share of
deadline-bound steps ending past their deadline toward ``r* = OVERRUN_AIM * (1 - q)``,
both ways::

    m = quantile_q'(...) * k
    k <- clamp(k * (1 + gain * CORRECTION_STEP * (overrun - r*)), 0.5, 2)

with ``overrun`` 1 when the step ended after its deadline and 0 otherwise; at
equilibrium ``(1 - r) * ln(1 - g*s*r*) + r * ln(1 + g*s*(1 - r*)) = 0`` gives
an overrun rate ``r`` of about ``r*``. Half, not all: a plan whose own late steps
take the whole allowed share puts the streams' P99 gap on the objective, and what it
does not plan (outliers, floor steps, boosts, each token's way to its reader) then
tips it over. Each overrun adds about 10% (``gain * CORRECTION_STEP`` at the default
gain), so overruns in runs (a slowdown the model has not caught up with) raise it
fast; each step within its deadline takes back ``gain * CORRECTION_STEP * r*``
(0.05%): some 300 deadline-bound steps from 1 to 0.86 where none ends late. Below 1 it
takes back what the tails over-cover: on the AMX Xeon at 110 ms with 2 streams, with
the correction held at 1 or more, 2 of 1,433 deadline steps ended late
(docs/results.md). ``MIN_CORRECTION`` keeps the increment's envelope at least half the
margin's where no step has ended late for a long while. On a plant the model predicts
exactly, ``k`` goes below 1 until steps end late, and holds them at the aimed share.
"""

from __future__ import annotations

OVERRUN_AIM = 0.5
"""The share of the late steps the streams' objective allows (``1 - q``) that the
correction aims the deadline-bound mixed steps at."""
CORRECTION_STEP = 0.2
"""Share of the gain one overrun (or one step within its deadline) moves the correction by,
times its error (``1 - r*`` or ``-r*``)."""
MIN_CORRECTION = 0.5
MAX_CORRECTION = 2.0


def planned_quantile(quantile: float) -> float:
    """The quantile the plan takes its tails at for the streams' ``quantile`` objective:
    the one whose exceedances are ``OVERRUN_AIM`` of those the objective allows."""
    return 1.0 - OVERRUN_AIM * (1.0 - quantile)


def corrected(correction: float, overrun: bool, gain: float, quantile: float) -> float:
    """The proportional law on the correction after one deadline-bound step, for the
    streams' ``quantile`` objective."""
    error = (1.0 if overrun else 0.0) - OVERRUN_AIM * (1.0 - quantile)
    value = correction * (1.0 + gain * CORRECTION_STEP * error)
    return min(max(value, MIN_CORRECTION), MAX_CORRECTION)
