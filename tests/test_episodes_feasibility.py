"""The window P99 gap's bootstrap interval over episodes and the feasibility it decides
(quick tier, hand-made records, no server)."""

from __future__ import annotations

import random

from bench.episodes.run import EpisodeRecord
from bench.episodes.stats import (
    NOT_FEASIBLE,
    UNDECIDED,
    WITHIN,
    format_episodes_markdown,
    summarize_episodes,
)
from bench.lib.records import RequestRecord
from bench.lib.stats import bootstrap_percentile_interval, percentile


def _run(arm: str, episode: int, gaps_s: list[float]) -> EpisodeRecord:
    """One decoding stream whose chunks are ``gaps_s`` apart from 2 s, inside a window
    of 2 s to 60 s; one short arrival with a TTFT of 1 s."""
    decoder = RequestRecord(0, "decoder", False, "", "", 0, 1000, 0.0, send_s=0.0)
    times = [2.0]
    for gap in gaps_s:
        times.append(times[-1] + gap)
    decoder.chunk_s, decoder.chunk_num_tokens, decoder.status = times, [1] * len(times), "ok"
    short = RequestRecord(1, "short", False, "", "", 0, 8, 2.0, send_s=2.0)
    short.chunk_s, short.chunk_num_tokens, short.status = [3.0], [1], "ok"
    return EpisodeRecord(
        episode, arm, 0, f"{episode:012x}", None, None, 0.0, [decoder], [short],
        lead_start_s=0.5, window_start_s=2.0, window_end_s=60.0, cut_s=None,
    )  # fmt: skip


def test_the_interval_resamples_whole_groups_and_is_fixed_by_its_seed() -> None:
    rng = random.Random(7)
    groups = [[rng.expovariate(1.0) for _ in range(rng.randrange(50, 200))] for _ in range(6)]
    interval = bootstrap_percentile_interval(groups, 99, num_resamples=500, seed=3)
    assert interval is not None
    low, high = interval
    point = percentile([v for g in groups for v in g], 99)
    assert point is not None and low <= point <= high and low < high
    assert bootstrap_percentile_interval(groups, 99, num_resamples=500, seed=3) == interval
    # Groups that agree leave no room: every resample pools the same values.
    same = [[1.0, 2.0, 3.0]] * 4
    assert bootstrap_percentile_interval(same, 99) == (3.0, 3.0)
    assert bootstrap_percentile_interval([[1.0, 2.0], []], 99) is None


def test_the_bootstrap_percentile_is_the_pooled_percentile_of_each_resample() -> None:
    rng = random.Random(11)
    groups = [[rng.uniform(0, 100) for _ in range(rng.randrange(1, 30))] for _ in range(5)]
    # One resample, drawn as the function draws it, recomputed by brute force.
    num_resamples, seed = 1, 5
    draw = random.Random(seed)
    present = [g for g in groups if g]
    drawn = [present[draw.randrange(len(present))] for _ in present]
    expected = percentile([v for g in drawn for v in g], 99)
    interval = bootstrap_percentile_interval(groups, 99, num_resamples=num_resamples, seed=seed)
    assert interval == (expected, expected)


def test_feasibility_is_decided_by_the_interval_not_the_point() -> None:
    slo_ms = 100.0
    small, large = [0.05] * 200, [0.05] * 190 + [0.3] * 10
    records = {
        # every episode's gaps within: the whole interval is under the objective
        "fixed-8": {e: _run("fixed-8", e, small) for e in range(6)},
        # every episode stalls: the whole interval is over it
        "fixed-256": {e: _run("fixed-256", e, large) for e in range(6)},
        # one episode of six stalls: the pooled P99 is within, the interval straddles it
        "dlfp-ct": {e: _run("dlfp-ct", e, large if e == 0 else small) for e in range(6)},
    }
    summary = summarize_episodes(records, itl_slo_ms=slo_ms)
    arms, verdict = summary["arms"], summary["verdict"]
    assert arms["fixed-8"]["feasibility"] == WITHIN
    assert arms["fixed-256"]["feasibility"] == NOT_FEASIBLE
    straddling = arms["dlfp-ct"]
    assert straddling["window_p99_gap_ms"] <= slo_ms
    assert straddling["window_p99_gap_interval_ms"]["high"] > slo_ms
    assert straddling["feasibility"] == UNDECIDED
    assert verdict["within_static_arms"] == ["fixed-8"]
    assert verdict["feasibility"] == {a: arms[a]["feasibility"] for a in records}
    table = format_episodes_markdown(summary)
    assert "| dlfp-ct | 6 | " in table and f"| {UNDECIDED} |" in table
    assert f"| {NOT_FEASIBLE} |" in table


def test_one_episode_decides_nothing() -> None:
    records = {"fixed-8": {0: _run("fixed-8", 0, [0.05] * 100)}}
    arm = summarize_episodes(records, itl_slo_ms=100.0)["arms"]["fixed-8"]
    assert arm["window_p99_gap_interval_ms"] is None and arm["feasibility"] == UNDECIDED
