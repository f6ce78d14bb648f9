"""The deadline plan (``plan: deadline``, the default of ``dlfp-ct``): prefill at the rate
the slack allows.

A step's time is the decodes' time plus the prefill increment (``slack_model``). Each step
with decodes gets the most prefill tokens whose increment, times the margin ``m`` for its
tail, fits the slack the tightest stream deadline leaves after the decodes' own tail::

    base  = end of the newest step (predicted while in flight, observed once done)
    slack = min_i end(token_i) + itl_slo - base - q_D * D(n, ctx)
    R(k)  = max{R : m * I(R, A(R)) <= (1 - delivery_share) * slack}

No floor for its own sake: a 1-token step is allowed. Where not even one token fits,
the step carries no prefill (counted: ``num_zero_prefill_steps``) when the slack is only
short now (a step ran long, the deadline is near); when the streams' objective leaves no
slack even right after a token (the decodes' own tail fills it), holding the prefill buys
them nothing a later step can keep, and the step carries ``min_cap_tokens``, as the
tightest static cap would (counted: ``num_floor_steps``): an admitted prompt is never held
without end. So does a step whose budget is under ``min_cap_tokens`` while the objective
is lost (over ``LOST_FACTOR`` times its allowed share of the recent deadline steps ended
late): trickling fewer tokens keeps no gap within it, and only delays the prompts; and so
does one whose first candidate's last token will not fit (its end takes floor steps
however it starts), where floor steps would finish it within ``ttft_slo_ms``; and one
whose budget's rate falls short of the rate the prompts' TTFT deadlines need
(``ttft_needed_rate``), which carries only the tokens that rate needs
(``_needed_tokens``). All count as load to shed for admission. A floor step carries more
than ``min_cap_tokens`` where the prompts' TTFT deadlines, each less a guard, need a
faster rate, within a step that ends by twice the objective (``_paced_tokens``), once
the streams' objective is out of reach (no slack, lost) or, for TTFT deadlines, where no
static cap keeps it or it is broken (``_may_pace``). A prefill past
its TTFT deadline is not forced beyond the slack: it goes on at the slack's rate. A step that
completes prefills ends with them (see ``DeadlinePlan.plan``). A prefill at risk of its
TTFT deadline may go beyond the slack where the steps it needs fit the overrun allowance
the streams' quantile objective leaves (see ``DeadlinePlan.plan``). Under ``observation:
device`` the plan works in completion time: it adds the host's share (``host_share``) to
each predicted device time. The plan aims below the streams' objective, at half the late
share it allows (``margin.planned_quantile``): ``q_D`` and ``m`` are tail quantiles at
that aim, ``m`` times a proportional correction toward the same share of deadline-bound
steps ending late (``margin.corrected``). Equations
in docs/scheduler.md, "Deadline plan".
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine_worker.controller.cost_model import StepShape, plan_prefill
from engine_worker.controller.host_share import HostShareWindow
from engine_worker.controller.margin import corrected, planned_quantile
from engine_worker.controller.modes import Observation
from engine_worker.controller.params import CapParams
from engine_worker.controller.slack_model import SlackModel
from engine_worker.controller.step_timing import StepRecord

RECENT_STEPS = 64
"""Steps whose end times the deadline plan can look up (a stream's last token is in one)."""
OVERRUN_WINDOW = 200
"""Completed deadline steps over which the overrun allowance is counted."""
KNEE_BOUND_SHARE = 0.9
"""A step the knee cut still counts as deadline-bound, its end within or past the deadline
feeding the margin's correction, while its increment at the margin fills this share of
the planned slack (at a tight objective the knee takes a token or two)."""
LOST_FACTOR = 10.0
"""The streams' objective counts as lost while more than this many times its allowed share
(``1 - margin_quantile``) of the last ``OVERRUN_WINDOW`` deadline steps ended late."""
LOST_MIN_STEPS = 50
"""Deadline steps completed before the objective can count as lost."""
FLOOR_NO_SLACK, FLOOR_LOST, FLOOR_END, FLOOR_TTFT = (
    "no_slack",
    "objective_lost",
    "end_lacks_slack",
    "ttft_at_risk",
)
"""Why a step went at the floor (``Deadline.floor_reason``, in the step log): not one token
fits even right after a token of the binding stream; the streams' objective is lost; the
first prompt's last token will not fit (its end takes floor steps however it starts); the
slack's rate would finish a waiting prompt after its TTFT deadline (``DeadlinePlan.plan``)."""


@dataclass(frozen=True)
class Deadline:
    """What the deadline plan decided for a step."""

    cap_tokens: int | None
    deadline_s: float | None
    margin: float | None
    is_bound: bool
    is_boost: bool = False
    """Whether the step goes beyond the slack to finish a prefill at risk of its TTFT."""
    is_floor: bool = False
    """Whether the step carries ``min_cap_tokens`` because the objective leaves no slack
    beside the decodes' own tail, is lost (``DeadlinePlan.objective_lost``), or will leave
    none at the first prompt's end (``DeadlinePlan._end_lacks_slack``), or goes beyond the
    slack's budget because its rate would hold a prompt past its TTFT deadline (then with
    only the tokens the deadlines need, ``DeadlinePlan._needed_tokens``, more than
    ``min_cap_tokens`` only where ``DeadlinePlan._may_pace``); for the first two, more
    where the prompts' TTFT deadlines need it (``DeadlinePlan._paced_tokens``)."""
    floor_reason: str | None = None
    """Which of those sent a floor step, the first that holds (``FLOOR_NO_SLACK``,
    ``FLOOR_LOST``, ``FLOOR_END``, ``FLOOR_TTFT``); None for any other step."""


class DeadlinePlan:
    """The deadline plan's state: the margin, the host's share, the recent steps' ends
    and the plan's counters. The controller holds one and feeds it every step."""

    def __init__(self, params: CapParams) -> None:
        self._params = params
        self.slack = SlackModel(planned_quantile(params.margin_quantile))
        self.host_share = HostShareWindow()
        self.margin_correction = 1.0
        self._recent: deque[StepRecord] = deque(maxlen=RECENT_STEPS)
        self.num_zero_prefill_steps = 0
        self.num_floor_steps = 0
        self.slack_rate_tokens_per_s: float | None = None
        """Prefill tokens a second at the latest deadline-bound step's budget (a floor
        step's tokens, paced or not, where it went at the floor), in the time a prompt
        waits for its steps (``_rate_tokens_per_s``)."""
        self.wants_ttft_rate = False
        """Whether the latest planned step's slack budget was under ``min_cap_tokens``, or
        its rate short of what the prompts' TTFT deadlines need (``FLOOR_TTFT``): the
        scheduler then reads that rate for the next step, as it does where a prompt is at
        risk (``prefill_selection``)."""
        self.num_ttft_overdue_steps = 0
        self.num_deadline_steps = 0
        self.num_deadline_misses = 0
        self.num_planned_steps = 0
        """Steps the plan sized (decodes and prefill candidates)."""
        self.num_boost_steps = 0
        self.num_knee_steps = 0
        """Steps whose prefill the plan cut to the knee of its rate (``step_rate_loss``)."""
        self.num_paced_steps = 0
        """Floor steps (``no_slack``, ``objective_lost``, ``ttft_at_risk``) that carried
        more than ``min_cap_tokens`` for the rate the prompts' TTFT deadlines need
        (``_paced_tokens``, ``_needed_tokens``)."""
        self._late: deque[bool] = deque(maxlen=OVERRUN_WINDOW)
        self._num_late = 0
        """Late steps in ``_late``."""
        self._boosts_in_flight = 0

    def apply_params(self, params: CapParams) -> None:
        self._params = params
        self.wants_ttft_rate = False
        self.slack.quantile = planned_quantile(params.margin_quantile)

    def reset_model(self) -> None:
        """Forget the slack model (its fits and tails), the correction and the host's share."""
        self.slack.reset()
        self.host_share.reset()
        self.margin_correction = 1.0
        self._late.clear()
        self._num_late = 0
        self.wants_ttft_rate = False

    def margin_value(self) -> float:
        return self.slack.margin() * self.margin_correction

    def host_s(self) -> float:
        """What the plan adds to a prediction for the host: its share's quantile under
        ``device`` (a prediction of device time), else 0 (the prediction holds it)."""
        return self.host_share.value_s() if self._params.observation == Observation.DEVICE else 0.0

    def predicted_end_s(self, now_s: float, predicted_s: float | None) -> float:
        """When a step dispatched now is predicted to end (before it is dispatched)."""
        return self._base_s(now_s) + (predicted_s or 0.0) + self.host_s()

    def dispatch(self, record: StepRecord) -> None:
        self._recent.append(record)

    def on_step_done(self, record: StepRecord) -> None:
        """A step completed: the host's share of it, and whether it met its deadline."""
        completion_s = record.completion_interval_s
        device_s = record.device_s
        # A step scheduled while nothing decoded may count idle time in its interval.
        if device_s is not None and completion_s is not None and record.num_decoding > 0:
            self.host_share.observe(completion_s, device_s)
        if record.is_boost:
            self._boosts_in_flight = max(self._boosts_in_flight - 1, 0)
        if record.deadline_s is not None and record.done_at_s is not None:
            is_late = record.done_at_s > record.deadline_s
            self.num_deadline_steps += 1
            self.num_deadline_misses += is_late
            if len(self._late) == self._late.maxlen:
                self._num_late -= self._late[0]
            self._late.append(is_late)
            self._num_late += is_late

    def overrun_allowance(self) -> float:
        """Overruns the streams' objective still allows: ``(1 - q) N`` over the last ``N``
        completed deadline steps, less those that ended late and the boosts in flight. The
        whole share, not the half the plan aims at (``margin``): the other half is left
        for what the plan does not plan, boosts among it."""
        return self._allowed_late() - self._num_late - self._boosts_in_flight

    def objective_lost(self) -> bool:
        """Whether the streams' objective is lost: of at least ``LOST_MIN_STEPS`` recent
        completed deadline steps, more than ``LOST_FACTOR`` times the share the objective
        allows (``1 - margin_quantile``) ended late."""
        return self._late_over(LOST_FACTOR)

    def objective_broken(self) -> bool:
        """Whether the streams' objective is broken: of at least ``LOST_MIN_STEPS`` recent
        completed deadline steps, more than the share it allows ended late (lost is more
        than ``LOST_FACTOR`` times that)."""
        return self._late_over(1.0)

    def _late_over(self, factor: float) -> bool:
        """Whether, of at least ``LOST_MIN_STEPS`` recent completed deadline steps, more
        than ``factor`` times the share the objective allows ended late."""
        return len(self._late) >= LOST_MIN_STEPS and self._num_late > factor * (
            self._allowed_late()
        )

    def _allowed_late(self) -> float:
        """Late steps the streams' ``q`` quantile objective allows among those counted in
        ``_late``: ``(1 - q) N``."""
        return (1.0 - self._params.margin_quantile) * len(self._late)

    def unplanned(
        self,
        now_s: float,
        oldest_token_step: int | None,
        own_deadlines: Sequence[tuple[int, float]] = (),
    ) -> Deadline:
        """The deadline of a step the plan did not size (no candidates, no model yet)."""
        return Deadline(None, self.deadline_s(now_s, oldest_token_step, own_deadlines), None, False)

    def deadline_s(
        self,
        now_s: float,
        oldest_token_step: int | None,
        own_deadlines: Sequence[tuple[int, float]] = (),
    ) -> float | None:
        """The tightest stream deadline: a last token's step end + its stream's objective
        (``itl_slo_ms`` for ``oldest_token_step``, their own for ``own_deadlines``), or
        twice that for a stream that has already broken it (it stops holding every
        prefill back, within twice its objective)."""
        return self._binding(now_s, oldest_token_step, own_deadlines)[0]

    def _binding(
        self,
        now_s: float,
        oldest_token_step: int | None,
        own_deadlines: Sequence[tuple[int, float]],
    ) -> tuple[float | None, float]:
        """``deadline_s``, and the objective (s) of the stream whose deadline it is (the
        controller's ``itl_slo_ms`` when no stream binds)."""
        base_s = self._base_s(now_s)
        tightest: float | None = None
        binding_s = self._params.itl_slo_ms / 1000.0
        steps = own_deadlines
        if oldest_token_step is not None:
            steps = [(oldest_token_step, self._params.itl_slo_ms / 1000.0), *own_deadlines]
        for step_index, itl_slo_s in steps:
            token_s = self._end_s(step_index)
            if token_s is None:  # older than the steps kept: count from now
                token_s = base_s
            deadline_s = token_s + itl_slo_s
            if deadline_s < base_s:
                deadline_s += itl_slo_s
            if tightest is None or deadline_s < tightest:
                tightest, binding_s = deadline_s, itl_slo_s
        return tightest, binding_s

    def plan(
        self,
        now_s: float,
        num_decoding: int,
        decode_context_tokens: int,
        candidates: Sequence[tuple[int, int]],
        oldest_token_step: int | None,
        ttft_overdue: bool = False,
        head_ttft_left_s: float | None = None,
        own_deadlines: Sequence[tuple[int, float]] = (),
        ttft_needed_rate: float | None = None,
        ttft_paced_rate: float | None = None,
    ) -> Deadline:
        """The step's cap: the tokens the slack allows, 0 where not one fits.

        ``ttft_needed_rate``: the prefill rate (tokens/s) that would meet every waiting
        prompt's TTFT deadline served earliest deadline first
        (``prefill_order.needed_rate``; None: not read). A budget of at least one token
        whose rate, ``R / (D + I(R) + host)``, falls short of it goes at the floor instead
        (``FLOOR_TTFT``), with the fewest tokens whose rate meets the larger of it and
        ``ttft_paced_rate`` (``_needed_tokens``): the slack's rate would hold a prompt past
        its deadline. That may be more than ``min_cap_tokens`` (and a budget of the floor
        or more goes at it) only where the tightest static cap's step would not keep the
        streams' objective or it is broken (``_may_pace``), within a step that ends by
        twice the objective (the paced floor's bound): the gaps are then over their
        objective whatever the step carries, and a gap within twice it, on a step the
        deadlines need, is weighed below a prompt past its TTFT objective (the rule and
        its equation in docs/scheduler.md, "Deadline plan"). The scheduler
        reads the rate where a prompt is at risk, or the plan asks for it
        (``wants_ttft_rate``: the latest budget was under the floor, or went at it for
        this rule). Prompts out of reach or already past their deadline are not in it:
        they go on at the slack's rate.

        ``ttft_paced_rate``: the same rate to each deadline less its guard
        (``prefill_order.paced_deadline``). A floor step for ``FLOOR_NO_SLACK`` or
        ``FLOOR_LOST`` carries the fewest tokens whose rate meets it, within a step that
        ends by twice the objective (``_paced_tokens``): the streams' objective is out of
        reach there, and the prompts' TTFT objectives are not.

        ``ttft_overdue`` (a candidate is past its TTFT deadline) is counted, not acted
        on: such a prefill goes on at the slack's rate, never forced beyond it.

        ``head_ttft_left_s``: the time left to the first candidate's TTFT deadline where
        the slack's rate would not finish it by then (at risk), else None. The step then
        goes beyond the slack for it (a boost; equation in docs/scheduler.md, "Deadline
        plan") when the boosts it needs fit the overrun allowance:

        - a boost gives it the tokens of a step that ends within one more ITL objective
          (``m * I(B) <= slack + itl_slo``), so every stream's gap stays under twice its
          objective;
        - at the latest start: one boost that finishes it (``R <= B``, ``R`` its remaining
          tokens), and earlier ones only where the slack's rate ``r`` would not bring it
          within one boost in time (``(R - B) / r + 2 itl_slo > left``): then
          ``k = ceil((R - r * left) / (B - b))`` boosts, ``b`` the slack's budget;
        - ``k <= overrun_allowance()``: the late gaps it costs are within the share the
          streams' ``q`` quantile objective allows, so no stream's objective is broken
          for the TTFT objective it saves.
        """
        p = self._params
        self.num_planned_steps += 1
        self.wants_ttft_rate = False
        self.num_ttft_overdue_steps += ttft_overdue
        margin = self.margin_value()
        deadline_s, itl_slo_s = self._binding(now_s, oldest_token_step, own_deadlines)
        left = sum(remaining for _, remaining in candidates)
        decodes = StepShape(num_decoding, decode_context_tokens)
        decode_s = self.slack.decode_s(decodes)
        limit = p.max_cap_tokens
        knee = None
        if deadline_s is None:
            cap = limit
        else:
            # NOTE: under device the model predicts device time, and the stream waits
            # for the host's share as well.
            host_s = self.host_s()
            decode_tail_s = decode_s * self.slack.decode_tail()
            slack_s = deadline_s - self._base_s(now_s) - host_s - decode_tail_s
            cap, attention = self.slack.budget_tokens(self._planned(slack_s), candidates, margin)
            limit = self._limit_tokens()
            if cap > limit:
                cap, attention = plan_prefill(candidates, limit)
            # The slack of a step that starts right after the binding stream's token, less
            # the delivery share as the budget: a token that fits the room but not its
            # planned part would otherwise hold the prompt at zero, unfloored.
            room_s = self._planned(itl_slo_s - host_s - decode_tail_s)
            floor_tokens = min(p.min_cap_tokens, left)
            floor_reason = (
                self._floor_reason(
                    room_s,
                    candidates[0],
                    margin,
                    decode_s,
                    floor_tokens,
                    (cap, attention),
                    ttft_needed_rate,
                )
                if cap < floor_tokens
                else self._ttft_reason((cap, attention), decode_s, ttft_needed_rate)
            )
            # A step that starts right after the binding stream's token and ends within
            # twice its objective: the bound of every pace.
            bound_s = room_s + self._planned(itl_slo_s)
            paced_most = 0
            if floor_reason == FLOOR_TTFT:
                if self._may_pace(room_s, candidates, margin, floor_tokens):
                    paced_most = self._bound_tokens(candidates, bound_s, limit, margin)
                if cap >= floor_tokens and paced_most <= cap:
                    # The slack's budget is the floor or more: only a pace goes beyond it.
                    floor_reason = None
            self.wants_ttft_rate = cap < floor_tokens or floor_reason == FLOOR_TTFT
            if floor_reason is not None:
                budget, cap = cap, floor_tokens
                self.num_floor_steps += 1
                if floor_reason == FLOOR_TTFT and ttft_needed_rate:
                    # NOTE: the fewest tokens above the slack's budget that keep the pace
                    # the deadlines need, not the whole floor: a floor step's extra
                    # tokens are what make it end late. Equation in docs/scheduler.md.
                    cap = self._needed_tokens(
                        candidates,
                        budget,
                        floor_tokens,
                        paced_most,
                        margin,
                        decode_s,
                        host_s,
                        max(ttft_needed_rate, ttft_paced_rate or 0.0),
                    )
                    self.num_paced_steps += cap > floor_tokens
                if floor_reason in (FLOOR_NO_SLACK, FLOOR_LOST) and ttft_paced_rate:
                    paced = self._paced_tokens(
                        candidates,
                        floor_tokens,
                        bound_s,
                        limit,
                        margin,
                        decode_s,
                        host_s,
                        ttft_paced_rate,
                    )
                    if paced > floor_tokens:
                        cap = paced
                        self.num_paced_steps += 1
                # The floor step's own token-context product, whichever rule sized it:
                # the rate read after it counts its attention.
                cap, attention = plan_prefill(candidates, cap)
            self.slack_rate_tokens_per_s = self._rate_tokens_per_s(cap, attention, decode_s, host_s)
            if floor_reason is not None:
                return Deadline(
                    cap, deadline_s, margin, False, is_floor=True, floor_reason=floor_reason
                )
            if head_ttft_left_s is not None and candidates:
                boost = self._boost_tokens(
                    cap, limit, slack_s, candidates[0], margin, head_ttft_left_s, itl_slo_s
                )
                if boost:
                    return Deadline(boost, deadline_s, margin, False, is_boost=True)
            else:
                knee = self._knee_tokens(cap, attention, decode_s + host_s, floor_tokens)
        # The deadline set the cap unless a bound did (``max_cap_tokens``, the trust
        # bound) or the prefills left did.
        is_bound = cap < limit and cap < left
        # NOTE: a step that completes prefills ends with them: the first tokens come
        # at the end of the step, so a short prompt is not kept waiting for a step
        # stretched to the deadline with the next prompt's chunk (which waits one
        # step instead). Equation in docs/scheduler.md, "Deadline plan".
        completed = 0
        for _, remaining in candidates:
            if completed + remaining > cap:
                break
            completed += remaining
        if completed:
            cap, is_bound = completed, False
        elif knee is not None and knee < cap:
            # NOTE: the step gives up at most step_rate_loss of the slack's rate to end
            # sooner: a prompt that arrives waits for the step in flight. Equation in
            # docs/scheduler.md, "Deadline plan".
            # A step the knee cut by little is still one the deadline sized: it feeds
            # the margin's correction (``observe``). Judged by the deadline-bound steps
            # the knee left alone, the correction saw 5 of 1,091 mixed steps at 110 ms
            # with 2 streams on the AMX Xeon (docs/scheduler.md, "kappa").
            is_bound = is_bound and margin * self.slack.increment_s(
                knee, plan_prefill(candidates, knee)[1]
            ) >= KNEE_BOUND_SHARE * self._planned(slack_s)
            cap = knee
            self.num_knee_steps += 1
        self.num_zero_prefill_steps += cap == 0
        return Deadline(cap, deadline_s, margin, is_bound)

    def _planned(self, slack_s: float) -> float:
        """The part of ``slack_s`` the plan may fill: all but its ``delivery_share``, left
        for a token's way to its reader, which the engine does not time (docs/scheduler.md,
        "Deadline plan"); no slack stays none."""
        return slack_s * (1.0 - self._params.delivery_share) if slack_s > 0 else slack_s

    def _limit_tokens(self) -> int:
        """The most a step may carry whatever the slack: ``max_cap_tokens``, and what the
        slack model's fits are trusted for (``SlackModel.trusted_tokens``)."""
        p = self._params
        return min(p.max_cap_tokens, self.slack.trusted_tokens(p.min_cap_tokens))

    def _floor_reason(
        self,
        room_s: float,
        head: tuple[int, int],
        margin: float,
        decode_s: float,
        floor_tokens: int,
        budget: tuple[int, float],
        ttft_needed_rate: float | None = None,
    ) -> str | None:
        """Why a step whose ``budget``, ``(tokens, token-context product)`` as
        ``SlackModel.budget_tokens`` gives it, is under ``floor_tokens`` goes at the floor
        (``plan``), the first rule that holds; None where none does."""
        cap = budget[0]
        if cap == 0 and self._lacks_slack(room_s, head, margin):
            return FLOOR_NO_SLACK
        if self.objective_lost():
            return FLOOR_LOST
        if self._end_lacks_slack(room_s, head, margin, decode_s, floor_tokens):
            return FLOOR_END
        return self._ttft_reason(budget, decode_s, ttft_needed_rate)

    def _may_pace(
        self,
        room_s: float,
        candidates: Sequence[tuple[int, int]],
        margin: float,
        floor_tokens: int,
    ) -> bool:
        """Whether a step for the prompts' TTFT deadlines may carry more than
        ``floor_tokens`` (``_needed_tokens``): at this step's margin, the tightest static
        cap's step, that many tokens from right after the binding stream's token, does not
        fit ``room_s`` (it would end past the streams' objective); or more of the recent
        deadline steps ended late than the objective allows (``objective_broken``). Where
        neither holds the boost, within the overrun allowance, is what goes beyond the
        slack. Equation in docs/scheduler.md, "Deadline plan"."""
        return (
            self.slack.budget_tokens(room_s, candidates, margin)[0] < floor_tokens
            or self.objective_broken()
        )

    def _ttft_reason(
        self, budget: tuple[int, float], decode_s: float, ttft_needed_rate: float | None
    ) -> str | None:
        """``FLOOR_TTFT`` where a ``budget`` of at least one token has a rate,
        ``R / (D + I(R) + host)``, short of ``ttft_needed_rate``: the slack's rate would
        hold a prompt past its TTFT deadline; None otherwise."""
        cap, attention = budget
        if cap and ttft_needed_rate:
            rate = self._rate_tokens_per_s(cap, attention, decode_s, self.host_s())
            return FLOOR_TTFT if rate < ttft_needed_rate else None
        return None

    def _paced_tokens(
        self,
        candidates: Sequence[tuple[int, int]],
        least: int,
        bound_s: float,
        limit: int,
        margin: float,
        decode_s: float,
        host_s: float,
        needed_rate: float,
    ) -> int:
        """The tokens of a floor step where the streams' objective is lost or leaves no
        slack: the fewest, at least ``least``, whose rate with the increment at its margin,
        ``R / (D + m I(R) + host)``, meets ``needed_rate``, the rate the prompts' TTFT
        deadlines need to their guards before them; at most those whose increment times
        ``margin`` fits ``bound_s`` (a step that starts right after the binding stream's
        token and ends within twice its objective) and ``limit``. The margin, not the mean:
        floor steps teach the fit nothing, so its error stays in them. The search takes the
        rate to rise with the tokens, as it does while the decodes' time exceeds the
        attention's quadratic part (the bound keeps the step short). Equation in
        docs/scheduler.md, "Deadline plan"."""
        most = self._bound_tokens(candidates, bound_s, limit, margin)
        if most <= least:
            return least
        meets = self._meets_rate(candidates, margin, decode_s, host_s, needed_rate)
        return least if meets(least) else _fewest_above(least, most, meets)

    def _needed_tokens(
        self,
        candidates: Sequence[tuple[int, int]],
        budget: int,
        floor_tokens: int,
        paced_most: int,
        margin: float,
        decode_s: float,
        host_s: float,
        needed_rate: float,
    ) -> int:
        """The tokens of a floor step for the prompts' TTFT deadlines (``FLOOR_TTFT``): the
        fewest above the slack's ``budget`` whose rate with the increment at its margin,
        ``R / (D + m I(R) + host)``, meets ``needed_rate``, at most the largest of
        ``floor_tokens``, the budget and ``paced_most``, and that where none does;
        ``paced_most`` is the paced floor's bound (a step that ends within twice the
        objective, ``_bound_tokens``) where the plan may pace (``_may_pace``), else 0. The
        margin, as ``_paced_tokens`` takes it: floor steps teach the fit nothing, so its
        error stays in them. The budget never meets it: ``_ttft_reason`` found its rate at
        the mean increment short of the unguarded rate, and the margin (at least 1) and the
        guarded rate only lower the one and raise the other. The search takes the rate to
        rise with the tokens, as it does while the decodes' time exceeds the attention's
        quadratic part; where it does not (steps of hundreds of tokens, as
        ``min_cap_tokens`` is on CUDA), it may return more than the fewest. Equation in
        docs/scheduler.md, "Deadline plan"."""
        meets = self._meets_rate(candidates, margin, decode_s, host_s, needed_rate)
        return _fewest_above(budget, max(floor_tokens, budget, paced_most), meets)

    def _bound_tokens(
        self, candidates: Sequence[tuple[int, int]], bound_s: float, limit: int, margin: float
    ) -> int:
        """The most tokens of ``candidates`` whose increment times ``margin`` fits
        ``bound_s``, at most ``limit``: the paced floor's bound."""
        return min(self.slack.budget_tokens(bound_s, candidates, margin)[0], limit)

    def _meets_rate(
        self,
        candidates: Sequence[tuple[int, int]],
        margin: float,
        decode_s: float,
        host_s: float,
        needed_rate: float,
    ) -> Callable[[int], bool]:
        """Whether steps of so many tokens of ``candidates`` prefill at ``needed_rate`` or
        faster, with the increment at ``margin`` (``_rate_tokens_per_s``)."""

        def meets(tokens: int) -> bool:
            attention = plan_prefill(candidates, tokens)[1]
            rate = self._rate_tokens_per_s(tokens, attention, decode_s, host_s, margin)
            return rate >= needed_rate

        return meets

    def _knee_tokens(self, tokens: int, attention: float, base_s: float, least: int) -> int:
        """The fewest prefill tokens whose rate beside ``base_s`` of decodes and host is at
        least ``1 - step_rate_loss`` of the rate of ``tokens`` (token-context product
        ``attention``): ``(1 - e) R B / (B + e I(R))``, exact where the increment is linear
        in tokens, and at least ``least`` (``tokens`` where it is fewer)."""
        loss = self._params.step_rate_loss
        if loss <= 0 or base_s <= 0 or tokens <= least:
            return tokens
        increment_s = self.slack.increment_s(tokens, attention)
        knee = math.ceil((1.0 - loss) * tokens * base_s / (base_s + loss * increment_s))
        return min(max(knee, least), tokens)

    def _rate_tokens_per_s(
        self, tokens: int, attention: float, decode_s: float, host_s: float, margin: float = 1.0
    ) -> float:
        """The prefill rate of steps carrying ``tokens`` (token-context product
        ``attention``) beside decodes of ``decode_s``, in the time a prompt waits for them:
        ``R / (D + m I(R) + host)``, ``host_s`` being ``host_s()`` (the host's share under
        ``device``, 0 else; the planned step has it at hand), ``m`` the increment's
        ``margin`` (1: its mean; ``_paced_tokens`` takes the plan's)."""
        step_s = decode_s + margin * self.slack.increment_s(tokens, attention) + host_s
        return tokens / step_s if step_s > 0 else 0.0

    def _lacks_slack(self, room_s: float, head: tuple[int, int], margin: float) -> bool:
        """Whether not one token of ``head`` (``(computed, remaining)``) fits ``room_s``, the
        slack of a step that starts right after a token of the binding stream (its objective
        less the host's share and the decodes' tail, less the delivery share): its
        increment, attention over the prompt's computed tokens included, times ``margin``
        exceeds it."""
        return self.slack.budget_tokens(room_s, [head], margin)[0] == 0

    def _end_lacks_slack(
        self,
        room_s: float,
        head: tuple[int, int],
        margin: float,
        decode_s: float,
        floor_tokens: int,
    ) -> bool:
        """Whether the first candidate's last token, its attention over the whole prompt
        included, will not fit ``room_s`` (``_lacks_slack`` at its end), where floor steps
        would finish it within ``ttft_slo_ms`` (the horizon the plan looks ahead): its end
        then takes floor steps beyond the slack however it starts, and trickling before
        them keeps no gap objective, it only delays its first token."""
        computed, remaining = head
        if not self._lacks_slack(room_s, (computed + remaining - 1, 1), margin):
            return False
        num_steps = -(-remaining // floor_tokens)
        floor_s = num_steps * decode_s + self.slack.increment_s(
            remaining, remaining * (computed + remaining / 2)
        )
        return floor_s <= self._params.ttft_slo_ms / 1000.0

    def _boost_tokens(
        self,
        cap: int,
        limit: int,
        slack_s: float,
        head: tuple[int, int],
        margin: float,
        left_s: float,
        itl_slo_s: float,
    ) -> int:
        """The at-risk head's boost (``plan``), 0 where the rule does not allow one;
        ``limit`` is the step's bound (``_limit_tokens``), ``itl_slo_s`` the objective of
        the stream whose deadline binds the step."""
        remaining = head[1]
        rate = self.slack_rate_tokens_per_s or 0.0
        deficit = remaining - rate * max(left_s, 0.0)
        tokens, _ = self.slack.budget_tokens(slack_s + itl_slo_s, [head], margin)
        tokens = min(tokens, limit)
        if deficit <= 0 or tokens <= cap:
            return 0
        num_boosts = 1
        if remaining > tokens:
            # NOTE: latest start: one boost that finishes it, once the slack's rate has
            # brought it within one, costs the least; boost now only if that comes too
            # late (a boosted step ends within twice the objective).
            reach_s = (remaining - tokens) / rate + 2 * itl_slo_s if rate > 0 else math.inf
            if reach_s <= left_s:
                return 0
            num_boosts = math.ceil(deficit / (tokens - cap))
        if num_boosts > self.overrun_allowance():
            return 0
        self.num_boost_steps += 1
        self._boosts_in_flight += 1
        return tokens

    def observe(self, record: StepRecord, observed_s: float) -> bool:
        """A guarded deadline-planned mixed step: the margin's correction.

        Returns whether the correction was updated (a feedback step).
        """
        if record.deadline_s is None or record.done_at_s is None:
            return False
        if record.is_boost or record.is_floor:
            return False  # late by design: it says nothing of the margin
        if self.slack.is_outlier(record.predicted_s, observed_s) and not self.slack.is_slower:
            return False  # no margin meets it; the slack model counts it
        overrun = record.done_at_s > record.deadline_s
        if not record.is_deadline_bound and not overrun:
            # The deadline did not set the cap (its bounds or the prefills left did):
            # a step within its deadline says nothing about the margin, a late one does.
            return False
        self.margin_correction = corrected(
            record.margin_correction, overrun, self._params.gain, self._params.margin_quantile
        )
        return True

    def _end_s(self, step_index: int) -> float | None:
        """When a recent step ended (observed) or is predicted to end (in flight)."""
        if not self._recent:
            return None
        offset = step_index - self._recent[0].step_index
        if not 0 <= offset < len(self._recent):
            return None
        record = self._recent[offset]
        return record.done_at_s if record.done_at_s is not None else record.predicted_end_s

    def _base_s(self, now_s: float) -> float:
        """When the next step's own time starts counting, for its predicted end.

        A completion-timed prediction counts from the end of the step before
        (predicted while it is in flight); a busy-time one from then or from
        dispatch, whichever is later.
        """
        latest = self._end_s(self._recent[-1].step_index) if self._recent else None
        if latest is None:
            return now_s
        return max(latest, now_s) if self._params.observation == Observation.BUSY else latest


def _fewest_above(low: int, high: int, meets: Callable[[int], bool]) -> int:
    """The fewest tokens in ``(low, high]`` that ``meets``, by bisection where it turns true
    as the tokens grow (``low`` does not); ``high`` where none does."""
    if not meets(high):
        return high
    while high - low > 1:  # meets(high); not meets(low)
        middle = (low + high) // 2
        if meets(middle):
            high = middle
        else:
            low = middle
    return high
