"""An online model of a step's busy time from its composition: tokens in, seconds out.

Pure Python (no vLLM, no numpy): five features, fitted by windowed
non-negative least squares on the steps the controller has seen complete::

    busy_s ~ c0 + c_dec * num_decode + c_dctx * decode_ctx / 1e4
               + c_pre * prefill / 1e3 + c_att * attention / 1e6

where ``attention = sum_i p_i * (s_i + p_i / 2)`` for each prefill chunk of
``p_i`` tokens starting at context ``s_i`` (the token-context product a
chunk's attention costs: a fixed-size chunk costs more as its prompt grows),
and ``decode_ctx`` is the context the decodes attend to. The scale factors
only keep the normal equations well conditioned.

Two windows, one of decode-only steps and one of steps with prefill, keep the
thousands of decode-only steps from crowding out the few mixed ones. No
offline profile and no per-model constant: the fit starts empty and
``is_ready`` turns true once the prefill window holds enough varied steps.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

NUM_FEATURES = 5
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
        return (
            1.0,
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
    """Windowed non-negative least squares of busy time on ``StepShape`` features.

    The normal equations are kept as running sums (a sample is added when it
    enters its window and subtracted when it leaves), so a refit costs one
    5x5 solve, not a pass over the windows: it runs on the engine's hot path.
    The decode-only step an ``auto`` target needs is the median of the recent
    decode-only steps as observed, not a prediction: on the real engine the
    joint fit (which shares its intercept and per-decode slope with the mixed
    steps) put a 90 ms decode step at 250 ms, and a fit of the decode-only
    steps alone extrapolated 108 ms to 208 ms at an unusual context.
    """

    def __init__(self, window_steps: int = WINDOW_STEPS) -> None:
        self._window_steps = window_steps
        self._decode_only: deque[tuple[tuple[float, ...], float]] = deque()
        self._with_prefill: deque[tuple[tuple[float, ...], float]] = deque()
        self._joint = _NormalEquations(NUM_FEATURES)
        self._coef: tuple[float, ...] | None = None
        self._num_samples = 0

    @property
    def num_samples(self) -> int:
        """Steps observed since start (not reset: telemetry)."""
        return self._num_samples

    @property
    def is_ready(self) -> bool:
        return self._coef is not None

    @property
    def coefficients(self) -> tuple[float, ...] | None:
        """Seconds per feature unit (see the module docstring), or None before a fit."""
        return self._coef

    def reset(self) -> None:
        self._decode_only.clear()
        self._with_prefill.clear()
        self._joint = _NormalEquations(NUM_FEATURES)
        self._coef = None

    def observe(self, shape: StepShape, busy_s: float) -> None:
        """Add a completed step; refit once enough steps with prefill were seen."""
        is_decode_only = not shape.num_prefill_tokens
        window = self._decode_only if is_decode_only else self._with_prefill
        sample = (shape.features(), busy_s)
        window.append(sample)
        self._joint.add(*sample, 1.0)
        if len(window) > self._window_steps:
            self._joint.add(*window.popleft(), -1.0)
        self._num_samples += 1
        if len(self._with_prefill) >= MIN_PREFILL_SAMPLES:
            self._coef = self._joint.solve()

    def predict_s(self, shape: StepShape) -> float | None:
        if self._coef is None:
            return None
        return sum(c * x for c, x in zip(self._coef, shape.features(), strict=True))

    def recent_decode_only_s(self) -> float | None:
        """The median busy time of the last ``RECENT_DECODE_STEPS`` decode-only steps."""
        recent = [busy for _, busy in list(self._decode_only)[-RECENT_DECODE_STEPS:]]
        return statistics.median(recent) if len(recent) >= MIN_PREFILL_SAMPLES else None


class _NormalEquations:
    """Running ``X'X`` and ``X'y`` of a window, solved with the slopes kept >= 0."""

    def __init__(self, num_features: int) -> None:
        self.gram = [[0.0] * num_features for _ in range(num_features)]
        self.rhs = [0.0] * num_features

    def add(self, x: Sequence[float], y: float, sign: float) -> None:
        for i, xi in enumerate(x):
            self.rhs[i] += sign * xi * y
            row = self.gram[i]
            for j, xj in enumerate(x):
                row[j] += sign * xi * xj

    def solve(self) -> tuple[float, ...]:
        return _nnls(self.gram, self.rhs)


def _nnls(gram: list[list[float]], rhs: list[float]) -> tuple[float, ...]:
    """Least squares with every coefficient but the intercept kept >= 0.

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
        negative = [i for i in active[1:] if coef[i] < 0]
        if not negative:
            return tuple(coef)
        active.remove(min(negative, key=lambda i: coef[i]))


def _solve(matrix: list[list[float]], rhs: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (n <= 5)."""
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
