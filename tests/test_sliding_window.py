"""The sliding window's values and its rank rule (``quantile``), against known cases."""

from __future__ import annotations

import random

import pytest

from bench.lib.stats import percentile
from engine_worker.controller.sliding_window import SlidingWindow, quantile

TEN = [float(v) for v in range(11, 21)]


def test_nearest_rank_is_the_ceil_q_n_th_smallest() -> None:
    assert quantile(TEN, 0.9) == 19.0  # ceil(9) = 9th
    assert quantile(TEN, 0.95) == 20.0  # ceil(9.5) = 10th
    assert quantile(TEN, 0.5) == 15.0
    assert quantile(TEN, 0.0) == 11.0 and quantile(TEN, 1.0) == 20.0


def test_strictly_above_differs_only_where_q_n_is_whole() -> None:
    assert quantile(TEN, 0.9, strictly_above=True) == 20.0
    assert quantile(TEN, 0.5, strictly_above=True) == 16.0
    assert quantile(TEN, 0.95, strictly_above=True) == quantile(TEN, 0.95) == 20.0
    assert quantile(TEN, 1.0, strictly_above=True) == 20.0


def test_a_rank_quantile_is_a_value_seen_unlike_the_reports_interpolation() -> None:
    assert percentile(TEN, 90) == pytest.approx(19.1)
    assert quantile(TEN, 0.9) in TEN


def test_quantile_needs_a_value() -> None:
    with pytest.raises(IndexError):
        quantile([], 0.5)


def test_window_keeps_the_last_values_sorted() -> None:
    rng = random.Random(7)
    window = SlidingWindow(capacity=16)
    values = [rng.uniform(0, 1) for _ in range(100)]
    for value in values:
        window.add(value)
    last = sorted(values[-16:])
    assert window.size == 16
    for q in (0.1, 0.5, 0.9, 0.99):
        assert window.quantile(q) == quantile(last, q)
    assert window.median() == (last[7] + last[8]) / 2
    window.clear()
    assert window.size == 0


def test_dropping_the_oldest_keeps_the_rest_sorted() -> None:
    window = SlidingWindow(capacity=4)
    for value in (3.0, 1.0, 4.0, 2.0):
        window.add(value)
    window.drop_oldest()
    assert window.size == 3
    assert window.quantile(0.0) == 1.0 and window.quantile(1.0) == 4.0
    assert window.median() == 2.0
