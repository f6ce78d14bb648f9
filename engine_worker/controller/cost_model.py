"""An online model of a step's time from its composition: tokens in, seconds out.

Pure Python (no vLLM, no numpy): six features, fitted by windowed
non-negative least squares on the steps the controller has seen complete::

    t ~ c_dec0 * [no prefill] + c_mix0 * [prefill]
          + c_dec * num_decode + c_dctx * decode_ctx / 1e4
          + c_pre * prefill / 1e3 + c_att * attention / 1e6

where ``attention = sum_i p_i * (s_i + p_i / 2)`` for each prefill chunk of
``p_i`` tokens starting at context ``s_i`` (the token-context product a
chunk's attention costs: a fixed-size chunk costs more as its prompt grows),
and ``decode_ctx`` is the context the decodes attend to. The scale factors
only keep the normal equations well conditioned. Decode-only and mixed steps
have intercepts of their own: they can be different execution modes (CUDA
graphs against eager), and a mixed step's fixed overhead must not leak into
the decode-only step.

Two windows, one of decode-only steps and one of steps with prefill, keep the
thousands of decode-only steps from crowding out the few mixed ones. Each
kind of step has a speed factor, the median of observed/fitted over its last
``SPEED_STEPS`` steps: a prediction is the fit times it, and a sample enters
the fit divided by it. So a change of the machine's speed shows within a few
steps instead of a window, and does not bend the fitted slopes. No offline profile and no
per-model constant: the fit starts empty and ``is_ready`` turns true once the
prefill window holds enough steps. The fit is solved lazily, when a
prediction needs it, so a run of decode-only steps costs no solve.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from engine_worker.controller.sliding_window import SlidingWindow

NUM_FEATURES = 6
NUM_INTERCEPTS = 2
"""The first features are intercepts (unconstrained); the slopes are kept >= 0."""
SPEED_STEPS = 8
"""Recent steps per window whose observed/fitted median is the speed factor."""
RECENT_DECODE_STEPS = 32
"""Decode-only steps the recent decode time is the median of."""
MIN_PREFILL_SAMPLES = 6
"""Prefill-carrying steps needed before the model predicts."""
WINDOW_STEPS = 96
"""Steps kept per window (decode-only, with prefill)."""
RIDGE = 1e-6
"""Tikhonov term: keeps the solve defined while a feature has not varied yet."""


@dataclass(frozen=True)
class StepShape:
    """What a step holds, as far as its cost goes."""

    num_decode_tokens: int = 0
    decode_context_tokens: int = 0
    """Sum over decodes of the context each attends to."""
    num_prefill_tokens: int = 0
    attention_tokens2: float = 0.0
    """Sum over prefill chunks of ``p * (s + p / 2)``: tokens times context."""

    def features(self) -> tuple[float, ...]:
        has_prefill = 1.0 if self.num_prefill_tokens else 0.0
        return (
            1.0 - has_prefill,
            has_prefill,
            float(self.num_decode_tokens),
            self.decode_context_tokens / 1e4,
            self.num_prefill_tokens / 1e3,
            self.attention_tokens2 / 1e6,
        )


def chunk_attention(start_tokens: int, num_tokens: int) -> float:
    """The token-context product of a prefill chunk of ``num_tokens`` after ``start_tokens``."""
    return num_tokens * (start_tokens + num_tokens / 2.0)


def plan_prefill(candidates: Sequence[tuple[int, int]], budget_tokens: int) -> tuple[int, float]:
    """Serve ``budget_tokens`` to ``(computed, remaining)`` candidates in order.

    Returns the prefill tokens scheduled and their token-context product.
    """
    left, attention = budget_tokens, 0.0
    for computed, remaining in candidates:
        if left <= 0:
            break
        take = min(remaining, left)
        attention += chunk_attention(computed, take)
        left -= take
    return budget_tokens - left, attention


class StepCostModel:
    """Windowed non-negative least squares of step time on ``StepShape`` features.

    The normal equations are kept as running sums (a sample is added when it
    enters its window and subtracted when it leaves), so a refit costs one
    6x6 solve, not a pass over the windows: it runs on the engine's hot path.
    The decode-only step an ``auto`` target needs is the median of the recent
    decode-only steps as observed, not a prediction: on the real engine a joint
    fit put a 90 ms decode step at 250 ms, and a fit of the decode-only steps
    alone extrapolated 108 ms to 208 ms at an unusual context.
    """

    def __init__(self, window_steps: int = WINDOW_STEPS) -> None:
        self._window_steps = window_steps
        self._decode_only: deque[tuple[tuple[float, ...], float]] = deque()
        self._with_prefill: deque[tuple[tuple[float, ...], float]] = deque()
        self._joint = _NormalEquations(NUM_FEATURES)
        self._coef: tuple[float, ...] | None = None
        self._speeds = (SlidingWindow(SPEED_STEPS), SlidingWindow(SPEED_STEPS))
        """Observed/fitted of the recent steps (decode-only, with prefill)."""
        self._speed_values = [1.0, 1.0]
        """Their medians, kept as they change (read on every prediction)."""
        self._is_stale = False
        self._recent_decode = SlidingWindow(RECENT_DECODE_STEPS)
        self._num_samples = 0

    @property
    def num_samples(self) -> int:
        """Steps observed since start (not reset: telemetry)."""
        return self._num_samples

    @property
    def num_prefill_samples(self) -> int:
        """Steps with prefill in the window."""
        return len(self._with_prefill)

    @property
    def is_ready(self) -> bool:
        return len(self._with_prefill) >= MIN_PREFILL_SAMPLES

    @property
    def coefficients(self) -> tuple[float, ...] | None:
        """Seconds per feature unit (see the module docstring), or None before a fit."""
        self._refit()
        return self._coef

    @property
    def speed(self) -> tuple[float, float]:
        """The speed factors (decode-only, with prefill) on the fit's predictions."""
        return (self._speed(0), self._speed(1))

    def reset(self) -> None:
        self._decode_only.clear()
        self._with_prefill.clear()
        self._joint = _NormalEquations(NUM_FEATURES)
        self._coef = None
        self._speeds = (SlidingWindow(SPEED_STEPS), SlidingWindow(SPEED_STEPS))
        self._speed_values = [1.0, 1.0]
        self._is_stale = False
        self._recent_decode = SlidingWindow(RECENT_DECODE_STEPS)

    def observe(self, shape: StepShape, seconds: float) -> None:
        """Add a completed step; the fit is solved when a prediction next needs it."""
        is_decode_only = not shape.num_prefill_tokens
        kind = 0 if is_decode_only else 1
        window = self._decode_only if is_decode_only else self._with_prefill
        features = shape.features()
        if self._coef is not None:  # the latest solve: observing never refits
            fitted = _dot(self._coef, features)
            if fitted > 0 and seconds > 0:
                self._speeds[kind].add(seconds / fitted)
                self._speed_values[kind] = self._speeds[kind].median()
        sample = (features, seconds / self._speed(kind))
        window.append(sample)
        self._joint.add(*sample, 1.0)
        if len(window) > self._window_steps:
            self._joint.add(*window.popleft(), -1.0)
        if is_decode_only:
            self._recent_decode.add(seconds)
        self._num_samples += 1
        self._is_stale = True
        if self._coef is None:
            self._refit()  # the first solve, once enough steps came: the speeds need one

    def predict_s(self, shape: StepShape) -> float | None:
        self._refit()
        return self._predict(shape)

    def predict_cached_s(self, shape: StepShape) -> float | None:
        """The prediction of the latest solve, without refitting (telemetry)."""
        return self._predict(shape)

    def prefill_rates(self) -> tuple[float, float] | None:
        """Seconds a prefill token adds to a step, and seconds per unit of its token-context
        product: a prefill of ``R`` tokens after ``s`` adds ``a * R + b * R * (s + R / 2)``."""
        self._refit()
        if self._coef is None:
            return None
        speed = self._speed(1)
        return self._coef[4] / 1e3 * speed, self._coef[5] / 1e6 * speed

    def recent_decode_only_s(self) -> float | None:
        """The median time of the last ``RECENT_DECODE_STEPS`` decode-only steps."""
        if self._recent_decode.size < MIN_PREFILL_SAMPLES:
            return None
        return self._recent_decode.median()

    def _predict(self, shape: StepShape) -> float | None:
        if self._coef is None:
            return None
        fitted = _dot(self._coef, shape.features())
        return fitted * self._speed(1 if shape.num_prefill_tokens else 0)

    def _speed(self, kind: int) -> float:
        return self._speed_values[kind]

    def _refit(self) -> None:
        if not self._is_stale:
            return
        self._is_stale = False
        self._coef = self._joint.solve() if self.is_ready else None


def _dot(coef: Sequence[float], features: Sequence[float]) -> float:
    return sum(c * x for c, x in zip(coef, features, strict=True))


class _NormalEquations:
    """Running ``X'X`` and ``X'y`` of a window, solved with the slopes kept >= 0."""

    def __init__(self, num_features: int) -> None:
        self.gram = [[0.0] * num_features for _ in range(num_features)]
        self.rhs = [0.0] * num_features

    def add(self, x: Sequence[float], y: float, sign: float) -> None:
        # NOTE: the same floats as ``row[j] += sign * xi * xj`` over indices (the product
        # is ``(sign * xi) * xj``), each row built by one comprehension: it runs every step.
        gram = self.gram
        for i, xi in enumerate(x):
            signed = sign * xi
            self.rhs[i] += signed * y
            gram[i] = [g + signed * xj for g, xj in zip(gram[i], x, strict=True)]

    def solve(self) -> tuple[float, ...]:
        return _nnls(self.gram, self.rhs)


def _nnls(gram: list[list[float]], rhs: list[float]) -> tuple[float, ...]:
    """Least squares with every coefficient but the intercepts kept >= 0.

    A step cannot get cheaper with more work, so a negative slope is noise:
    drop the most negative feature and refit (a small active-set loop).
    """
    num_features = len(rhs)
    active = list(range(num_features))
    while True:
        sub = [[gram[i][j] + (RIDGE if i == j else 0.0) for j in active] for i in active]
        solution = _solve(sub, [rhs[i] for i in active])
        coef = [0.0] * num_features
        for index, value in zip(active, solution, strict=True):
            coef[index] = value
        negative = [i for i in active if i >= NUM_INTERCEPTS and coef[i] < 0]
        if not negative:
            return tuple(coef)
        active.remove(min(negative, key=lambda i: coef[i]))


def _solve(matrix: list[list[float]], rhs: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (n <= 6)."""
    n = len(rhs)
    a = [[*row, b] for row, b in zip(matrix, rhs, strict=True)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        if a[col][col] == 0.0:
            continue
        for row in range(col + 1, n):
            factor = a[row][col] / a[col][col]
            for k in range(col, n + 1):
                a[row][k] -= factor * a[col][k]
    x = [0.0] * n
    for row in range(n - 1, -1, -1):
        if a[row][row] == 0.0:
            continue
        x[row] = (a[row][n] - sum(a[row][k] * x[k] for k in range(row + 1, n))) / a[row][row]
    return x
