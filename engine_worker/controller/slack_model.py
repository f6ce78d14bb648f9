"""The slack-rate model: a step's time as decode time plus the prefill increment.

Pure Python, on the scheduler's hot path (no matrix solve: two recursive fits of three
and two parameters, each updated in microseconds). A step of ``n`` decodes attending to
``ctx`` tokens, with ``R`` prefill tokens of token-context product ``A``, takes::

    t = D(n, ctx) + I(R, A)
    D(n, ctx) = d0 + d1 * n + d2 * ctx / 1e4     fitted on decode-only steps (and see below)
    I(R, A)   = i1 * R / 1e3 + i2 * A / 1e6      fitted on t - D(n, ctx) of mixed steps

Each is a recursive least-squares fit with forgetting (``FORGETTING``), so a slower or a
faster machine shows within tens of steps, its slopes held non-negative (a slope the
estimate puts below 0 is held at 0 and the others refitted, not clamped afterwards).
The increment's scale is identified: it is fitted on what a mixed step took beyond the
decode time measured without prefill, not jointly with it, so no speed factor can trade
against its slopes. It has no intercept:
a constant there would take up a drift of the decode time while every step carries
prefill, and hold the budget at zero after the drift is gone. Instead a mixed step whose
increment is small (below ``MIN_INCREMENT_SHARE`` of ``D``) also updates ``D``, with
``t - I``, so the decode time follows the machine when no decode-only step comes.

The tails have windows of their own: the decodes' is the ``q`` quantile of observed/``D`` over the
recent decode-only steps, the increment's (the margin ``m``, at least 1) that of
``(t - q_D * D) / I`` over the recent mixed steps whose increment is at least
``MIN_INCREMENT_SHARE`` of ``D`` (below it the errors of ``D``, not the increment's,
set the ratio): so ``q_D * D + m * I`` bounds a ``q`` share of mixed steps, and the
decodes' noise, which their own tail covers, is not counted twice. A step beyond
``OUTLIER_RATIO`` times its prediction is an outlier: counted, kept out of both tails
and fits (no plan can meet it, and the tail would stay inflated for a whole window);
from the ``OUTLIER_RUN``-th in a row they are the machine's new speed, and learnt by the
fits and the increment's tail, not the decodes' tail: their ratio is to the fit of the
speed before, and few decode-only steps come to flush that tail while prefills wait
(mixed steps come often enough to flush the increment's). A ratio leaves the
increment's tail ``MARGIN_MAX_AGE`` steps with prefill after it came, flushed or not,
floor steps counted (``pass_over``), though the fits do not learn them. Without that, a
ratio learnt in a slow spell held the margin for as long as only small increments or floor
steps came, and a high margin itself sends them. Before the fits are ready
nothing is an outlier: every decode-only step enters the decodes' tail.

The fits are trusted only near the sizes they predict: a step with decodes carries at
most ``TRUST_GROWTH`` times the largest prefill of the last ``TRUST_STEPS`` such steps
that were not outliers (``trusted_tokens``), floor steps among them, which the fits do
not learn (``observe_floor``). With decode counts that barely vary, the
decode fit's intercept and per-decode slope are not both identified, and a new count
can move ``D`` far off; the increment, fitted on ``t - D``, then follows it to the floor
of its rates, where every token fits the slack. The bound turns such a collapse into
steps at most twice the last ones, learnt as the machine's speed from the
``OUTLIER_RUN``-th in a row; the bound grows only once the fits predict a larger size.

The prefill budget of a step with ``slack`` seconds left after the decodes' tail
``q_D * D`` is the most tokens whose increment, times the margin, fits it: with
candidates served in order, the ``r`` tokens taken from one whose prompt has ``s``
tokens computed add ``i1' * r + i2' * r * (s + r / 2)`` (primed: per token), so each
candidate's share is the root of a quadratic (``budget_tokens``); no floor, and zero
tokens only when even one does not fit.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

from engine_worker.controller.cost_model import StepShape
from engine_worker.controller.sliding_window import SlidingWindow

FORGETTING = 0.98
"""Each fit's weight on the step before: a memory of about 50 steps."""
MAX_COVARIANCE = 1e6
"""The fits stop forgetting past this trace, so a spell without excitation cannot wind up."""
TAIL_STEPS = 128
"""Steps per tail window (decode-only, mixed)."""
MIN_DECODE_SAMPLES = 8
MIN_INCREMENT_SAMPLES = 8
MIN_TAIL_SAMPLES = 8
STARTING_TAIL = 1.5
"""Both tails' factor while their windows hold fewer than ``MIN_TAIL_SAMPLES`` ratios."""
TRUST_STEPS = 64
"""Steps with decodes and prefill, not outliers, whose largest prefill bounds the next."""
TRUST_GROWTH = 2
"""The most a step's prefill may exceed the largest of the last ``TRUST_STEPS`` by."""
MARGIN_MAX_AGE = 256
"""Steps with prefill (learnt, outliers and floor steps alike) after which a ratio leaves
the increment's tail (the margin): had the fits learnt them all, the fits the ratio was
measured against would weigh ``FORGETTING ** 256``, under 1%. Where more than every
other such step gives a ratio, the window's ``TAIL_STEPS`` flush it sooner."""
MIN_INCREMENT_SHARE = 0.25
"""The least increment (a share of the decode time) whose ratio the margin learns."""
OUTLIER_RATIO = 1.5
"""A step this many times its prediction is an outlier (see the module doc); slow steps
below it that come often enough to matter raise the margin's correction instead."""
OUTLIER_RUN = 4
"""Outliers in a row that are no longer outliers but the machine's new speed: learnt."""
MIN_TOKEN_S = 1e-6
"""The least a prefill token is taken to cost (the per-token slope may be held at 0)."""


class _RecursiveFit:
    """Least squares of ``y`` on a few features, updated one sample at a time, its slopes
    held non-negative: the coefficients from ``num_free`` on (a step cannot get cheaper
    with more work).

    ``theta`` is the fit with each slope that the unconstrained estimate puts below 0
    held at 0 and the others refitted (``_held_nonnegative``), not clamped afterwards.
    Clamping kept the slope the negative one had traded against: with prompts whose
    context barely varies, tokens and token-context product are nearly collinear, and an
    increment fit of 31 ms a token less 16 ms per 1e6 token-context, right within its
    band, predicted 270 ms for 8-token steps of 42 to 50 ms once the negative term was
    clamped to 0 (and held the plan at its floor)."""

    def __init__(self, num_features: int, num_free: int = 0) -> None:
        self._n = range(num_features)
        self._num_free = num_free
        self._estimate = [0.0] * num_features
        """The unconstrained estimate, which the recursion updates."""
        self.theta = [0.0] * num_features
        self._p = [[1e3 if i == j else 0.0 for j in self._n] for i in self._n]
        self.num_samples = 0

    def predict(self, x: Sequence[float]) -> float:
        value = 0.0
        for t, v in zip(self.theta, x, strict=True):
            value += t * v
        return value

    def update(self, x: Sequence[float], y: float) -> None:
        # NOTE: index loops over a few features, not comprehensions or numpy: each
        # comprehension is a call, and this runs once or twice a step. The covariance's
        # upper triangle is updated and mirrored: kept exactly symmetric (its rounding
        # otherwise grows by 1 / FORGETTING a step in the directions the steps do not
        # excite, and it turned indefinite).
        p, estimate, indices = self._p, self._estimate, self._n
        trace = 0.0
        for i in indices:
            trace += p[i][i]
        forget = FORGETTING if 0 < trace < MAX_COVARIANCE else 1.0
        px = []
        denominator = forget
        error = y
        for i in indices:
            row, value = p[i], 0.0
            for j in indices:
                value += row[j] * x[j]
            px.append(value)
            denominator += x[i] * value
            error -= estimate[i] * x[i]
        scale = error / denominator
        num_features = len(px)
        for i in indices:
            gain, row = px[i] / denominator, p[i]
            estimate[i] += px[i] * scale
            for j in range(i, num_features):
                value = (row[j] - gain * px[j]) / forget
                row[j] = value
                p[j][i] = value
        self.theta = _held_nonnegative(estimate, p, self._num_free)
        self.num_samples += 1


def _held_nonnegative(
    estimate: list[float], covariance: list[list[float]], num_free: int
) -> list[float]:
    """The least-squares fit with the coefficients from ``num_free`` on held >= 0.

    The most negative slope is held at 0 and the others refitted, until none is below 0;
    a slope once held stays held (the greedy active set, as ``cost_model``'s windowed fit
    does: with two slopes below 0 it may hold one the exact non-negative fit would not).
    A fit held at ``theta_k = 0`` is ``theta - P e_k theta_k / P_kk``, ``P`` the
    covariance (the inverse of the normal equations' matrix), and ``P - P e_k e_k' P /
    P_kk`` is the covariance of the others then: no solve. Where ``P_kk`` is not positive
    (a covariance gone wrong), the slope is set to 0 without refitting the others."""
    n = len(estimate)
    if min(estimate[num_free:], default=0.0) >= 0:
        return estimate[:]
    theta, p = estimate[:], covariance
    held: list[int] = []
    # A held slope whose refit the covariance ``p`` does not reflect yet: downdated only
    # where another slope is to be held (one is the common case).
    pending = -1
    while True:
        k, lowest = -1, 0.0
        for i in range(num_free, n):
            if theta[i] < lowest and i not in held:
                k, lowest = i, theta[i]
        if k < 0:
            return theta
        if pending >= 0:
            column = [row[pending] for row in p]
            pk = column[pending]
            p = [
                [r - ci * cj / pk for r, cj in zip(row, column, strict=True)]
                for row, ci in zip(p, column, strict=True)
            ]
        pk, pending = p[k][k], -1
        if pk > 0:
            shift = lowest / pk
            theta = [t - row[k] * shift for t, row in zip(theta, p, strict=True)]
            pending = k
        held.append(k)
        for i in held:
            theta[i] = 0.0


def _decode_features(shape: StepShape) -> tuple[float, float, float]:
    return (1.0, float(shape.num_decode_tokens), shape.decode_context_tokens / 1e4)


def _increment_features(num_prefill: int, attention: float) -> tuple[float, float]:
    return (num_prefill / 1e3, attention / 1e6)


class SlackModel:
    """The decode time, the prefill increment and their tails (see the module doc)."""

    def __init__(self, quantile: float) -> None:
        self.quantile = quantile
        self._decode = _RecursiveFit(3, num_free=1)
        self._increment = _RecursiveFit(2)
        self._decode_tail = SlidingWindow(TAIL_STEPS)
        self._increment_tail = SlidingWindow(TAIL_STEPS)
        self._num_prefill_steps = 0
        """Steps with prefill observed or passed over: the clock the margin's ratios age by."""
        self._margin_ages: deque[int] = deque(maxlen=TAIL_STEPS)
        """``_num_prefill_steps`` when each ratio in the increment's tail came, oldest first."""
        self.num_outliers = 0
        self._outliers_in_a_row = 0
        self._chunks: deque[int] = deque(maxlen=TRUST_STEPS)
        """Prefill tokens of the last steps with decodes that were not outliers."""

    def reset(self) -> None:
        self.__init__(self.quantile)  # type: ignore[misc]

    @property
    def is_ready(self) -> bool:
        return (
            self._decode.num_samples >= MIN_DECODE_SAMPLES
            and self._increment.num_samples >= MIN_INCREMENT_SAMPLES
        )

    @property
    def needs_decode_steps(self) -> bool:
        """Whether the decode fit has too few decode-only steps to stand on."""
        return self._decode.num_samples < MIN_DECODE_SAMPLES

    @property
    def num_margin_samples(self) -> int:
        return self._increment_tail.size

    @property
    def num_increment_samples(self) -> int:
        return self._increment.num_samples

    def decode_s(self, shape: StepShape) -> float:
        return max(self._decode.predict(_decode_features(shape)), 0.0)

    def increment_s(self, num_prefill: int, attention: float) -> float:
        per_token, per_context = self._rates()
        return per_token * num_prefill + per_context * attention

    def predict_s(self, shape: StepShape) -> float | None:
        """The step's expected time (no tail), or None before the fits are ready."""
        if not self.is_ready:
            return None
        increment = self.increment_s(shape.num_prefill_tokens, shape.attention_tokens2)
        return self.decode_s(shape) + increment

    def decode_tail(self) -> float:
        """The decodes' tail factor: ``q`` quantile of observed/predicted decode-only time."""
        return self._tail(self._decode_tail)

    def margin(self) -> float:
        """The increment's tail factor, at least 1."""
        return max(self._tail(self._increment_tail), 1.0)

    def coefficients(self) -> tuple[float, ...] | None:
        """The fits in ``cost_model.StepCostModel.coefficients``' layout (decode-only and
        mixed intercepts, per decode, per 1e4 decode context, per 1e3 prefill, per 1e6
        attention), for admission's start-up prior and the telemetry; None before ready."""
        if not self.is_ready:
            return None
        d0, d1, d2 = self._decode.theta
        i1, i2 = self._increment.theta
        return (d0, d0, d1, d2, i1, i2)

    def prefill_rates(self) -> tuple[float, float] | None:
        """Seconds a prefill token adds, and seconds per unit of token-context product."""
        return self._rates() if self.is_ready else None

    def _rates(self) -> tuple[float, float]:
        theta = self._increment.theta
        return max(theta[0] / 1e3, MIN_TOKEN_S), theta[1] / 1e6

    @property
    def is_slower(self) -> bool:
        """Whether the latest outliers came in a run: the machine, not a burst."""
        return self._outliers_in_a_row >= OUTLIER_RUN

    def is_outlier(self, predicted_s: float | None, seconds: float) -> bool:
        return predicted_s is not None and seconds > OUTLIER_RATIO * predicted_s

    def trusted_tokens(self, least: int) -> int:
        """The most prefill tokens a step with decodes may carry: ``TRUST_GROWTH`` times the
        largest of the last ``TRUST_STEPS`` such steps that were not outliers, and at least
        ``TRUST_GROWTH * least``."""
        seen = max(self._chunks, default=0)
        return TRUST_GROWTH * max(seen, least)

    def observe(self, shape: StepShape, seconds: float) -> None:
        """A completed step's time (seconds, as the controller observes them)."""
        if not math.isfinite(seconds) or seconds <= 0:
            return
        num_prefill = shape.num_prefill_tokens
        if num_prefill:
            self.pass_over()
        decode_s = self.decode_s(shape)
        increment_s = self.increment_s(num_prefill, shape.attention_tokens2)
        # predict_s's, from the parts at hand
        predicted_s = decode_s + increment_s if self.is_ready else None
        is_outlier = self._trust_size(shape, predicted_s, seconds)
        if is_outlier:
            self._outliers_in_a_row += 1
            if self._outliers_in_a_row < OUTLIER_RUN:
                self.num_outliers += 1
                return
        else:
            self._outliers_in_a_row = 0
        if not num_prefill:
            # NOTE: a step learnt as the new speed moves the fit, not the tail (module doc).
            if self._decode.num_samples >= MIN_DECODE_SAMPLES and decode_s > 0 and not is_outlier:
                self._decode_tail.add(seconds / decode_s)
            self._decode.update(_decode_features(shape), seconds)
            return
        if self._decode.num_samples < MIN_DECODE_SAMPLES:
            return  # an increment needs a decode time to stand on
        x = _increment_features(num_prefill, shape.attention_tokens2)
        is_small = increment_s < MIN_INCREMENT_SHARE * decode_s
        if self.is_ready and not is_small and decode_s > 0:
            # What the step took beyond the decodes' tail, per predicted increment: its
            # q quantile is the margin that keeps q_D * D + m * I above a q share of steps.
            self._increment_tail.add((seconds - decode_s * self.decode_tail()) / increment_s)
            self._margin_ages.append(self._num_prefill_steps)
        self._increment.update(x, seconds - decode_s)
        if self.is_ready and is_small:
            # NOTE: a small increment leaves the step mostly decodes: the decode time
            # follows the machine even while every step carries prefill.
            self._decode.update(_decode_features(shape), seconds - increment_s)

    def observe_floor(self, shape: StepShape, seconds: float | None) -> None:
        """A completed floor step (``seconds``: None where it was not timed), which the fits
        do not learn (``step_events``): it ages the margin's ratios (``pass_over``), and
        where it ended within ``OUTLIER_RATIO`` of its prediction its size is one the fits
        predict, so the trust bound (``trusted_tokens``) grows on it as on any other.
        Without that, a run of floor steps held the bound at twice the last steps the slack
        sized: a floor paced to the prompts' TTFT deadlines was held at 18 tokens a step
        while their deadlines needed more, and a prompt came past its objective
        (docs/results.md)."""
        self.pass_over()
        if seconds is None or not math.isfinite(seconds) or seconds <= 0:
            return
        predicted_s = self.predict_s(shape)
        if predicted_s is not None:
            self._trust_size(shape, predicted_s, seconds)

    def _trust_size(self, shape: StepShape, predicted_s: float | None, seconds: float) -> bool:
        """Whether a completed step is an outlier; one with decodes and prefill that is not
        has a size the fits predict, which the trust bound is taken from
        (``trusted_tokens``)."""
        is_outlier = self.is_outlier(predicted_s, seconds)
        if shape.num_prefill_tokens and shape.num_decode_tokens and not is_outlier:
            self._chunks.append(shape.num_prefill_tokens)
        return is_outlier

    def pass_over(self) -> None:
        """A step with prefill went by, observed or not (a floor step, which the fits do
        not learn): the margin's ratios ``MARGIN_MAX_AGE`` such steps old leave its tail."""
        self._num_prefill_steps += 1
        ages, oldest = self._margin_ages, self._num_prefill_steps - MARGIN_MAX_AGE
        while ages and ages[0] <= oldest:
            ages.popleft()
            self._increment_tail.drop_oldest()

    def budget_tokens(
        self, slack_s: float, candidates: Sequence[tuple[int, int]], margin: float
    ) -> tuple[int, float]:
        """The most prefill tokens, served to ``(computed, remaining)`` candidates in order,
        whose increment times ``margin`` fits ``slack_s``; and their token-context product."""
        budget = slack_s / margin
        if budget <= 0:
            return 0, 0.0
        per_token, per_context = self._rates()
        # NOTE: the factors of the quadratic hoisted out of the loop: the same floats
        # (4 * q * budget is (4 * q) * budget), once a step rather than once a candidate.
        quadratic = per_context / 2
        four_quadratic, two_quadratic = 4 * quadratic, 2 * quadratic
        sqrt = math.sqrt
        total, attention = 0, 0.0
        for computed, remaining in candidates:
            # (per_context / 2) r^2 + (per_token + per_context * s) r <= budget
            linear = per_token + per_context * computed
            if per_context > 0:
                root = (-linear + sqrt(linear * linear + four_quadratic * budget)) / two_quadratic
            else:
                root = budget / linear
            whole = int(root)
            take = remaining if remaining < whole else whole
            if take <= 0:
                break
            total += take
            attention += take * (computed + take / 2)
            budget -= take * (linear + per_context * take / 2)
            if take < remaining:
                break
        return total, attention

    def _tail(self, window: SlidingWindow) -> float:
        if window.size < MIN_TAIL_SAMPLES:
            return STARTING_TAIL
        return window.quantile(self.quantile)
