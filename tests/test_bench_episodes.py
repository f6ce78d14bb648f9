"""``bench episodes`` against the FAKE OpenAI server (quick tier, no engine), and its
figures and verdict computed from hand-made records.

The fake streams at a fixed pace and prefills instantly: it checks what the harness
sends, in what order, and what it records, never a timing.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

import pytest

from bench.episodes.loop import _check_plan, balanced_order
from bench.episodes.run import (
    EpisodeRecord,
    EpisodeShape,
    episode_offsets,
    read_record,
    read_records,
    record_path,
    steps_path,
    write_record,
)
from bench.episodes.setup import arm_patch, check_arm_names, conditions, default_arm_names
from bench.episodes.stats import SENTINEL, summarize_episodes, window_gaps
from bench.lib.records import RequestRecord, open_text
from engine_worker.controller.params import CapParams
from gateway.cli import main as gateway_main
from tests.fake_openai_server import ADMIN_TOKEN, FakeOpenAIServer

ARMS = ("off", "fixed-16", "dlfp-ct")
NONCE = re.compile(r"^\[run ([0-9a-f]{12})\] ")


def _args(fake: FakeOpenAIServer, results: Path, *extra: str) -> list[str]:
    return [
        "bench",
        "episodes",
        "--base-url",
        fake.base_url,
        "--admin-token",
        ADMIN_TOKEN,
        "--results",
        str(results),
        "--episodes",
        "3",
        "--decoders",
        "2",
        "--kinds",
        "long,short",
        "--offsets",
        "0,0.05",
        "--offset-jitter-s",
        "0.05",
        "--arms",
        ",".join(ARMS),
        "--itl-slo-ms",
        "40",
        "--lead-s",
        "0.15",
        "--tail-s",
        "0.05",
        "--long-prefill-s",
        "0.01",
        *extra,
    ]


def _prompts_by_nonce(fake: FakeOpenAIServer) -> dict[str, list[str]]:
    """What the fake was sent, by the nonce that opens each prompt (probes have none)."""
    found: dict[str, list[str]] = defaultdict(list)
    for body in fake.requests:
        match = NONCE.match(body["messages"][-1]["content"])
        if match:
            found[match.group(1)].append(body["messages"][-1]["content"][match.end() :])
    return found


def test_every_arm_replays_the_same_episode_in_a_rotated_order(
    fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    assert gateway_main(_args(fake_server, tmp_path)) == 0
    records = read_records(tmp_path)
    assert set(records) == set(ARMS) and all(len(r) == 3 for r in records.values())
    sent = _prompts_by_nonce(fake_server)
    jitters: set[tuple[float, ...]] = set()
    for episode in range(3):
        runs = {arm: records[arm][episode] for arm in ARMS}
        # The same prompts in every arm, each arm with its own nonce.
        assert len({r.nonce for r in runs.values()}) == len(ARMS)
        prompts = {arm: sorted(sent[r.nonce]) for arm, r in runs.items()}
        assert len(prompts["off"]) == 4 and all(p == prompts["off"] for p in prompts.values())
        # A balanced order: over the three episodes every arm runs once in every position.
        order = sorted(ARMS, key=lambda arm: runs[arm].position)
        assert order == [ARMS[i] for i in balanced_order(len(ARMS), episode)]
        assert len({r.prompts_sha256 for r in runs.values()}) == 1
        for run in runs.values():
            assert run.error is None, run.error
            assert [a.kind for a in run.arrivals] == ["long", "short"]
            assert run.lead_start_s is not None and run.window_start_s is not None
            sends = [(a.send_s or 0.0) - run.lead_start_s - 0.15 for a in run.arrivals]
            planned = [a.scheduled_s - run.lead_start_s - 0.15 for a in run.arrivals]
            assert sends == pytest.approx(planned, abs=0.03)
            assert 0.0 <= planned[0] < 0.05 <= planned[1] < 0.1  # jittered, in order
            assert all(d.status == "ok" and d.chunk_s for d in run.decoders)
            assert (run.cut_s or 0.0) >= (run.window_end_s or 0.0) + 0.05
        # Every arm sends the episode's arrivals at the same offsets.
        offsets = {
            arm: tuple(round(a.scheduled_s - (r.lead_start_s or 0.0), 9) for a in r.arrivals)
            for arm, r in runs.items()
        }
        assert len(set(offsets.values())) == 1, offsets
        jitters.add(offsets["off"])
    positions = {arm: {records[arm][e].position for e in range(3)} for arm in ARMS}
    assert all(p == {0, 1, 2} for p in positions.values()), positions
    # Episodes differ from each other, in their prompts and their arrival times.
    assert len(jitters) == 3
    assert len({tuple(sorted(sent[records["off"][e].nonce])) for e in range(3)}) == 3
    # Each run keeps the scheduler steps polled while it ran, none twice.
    first_steps = []
    for arm in ARMS:
        for episode in range(3):
            with open_text(steps_path(tmp_path, episode, arm)) as f:
                steps = json.load(f)["steps"]
            indices = [s["step_index"] for s in steps]
            assert indices and indices == list(range(indices[0], indices[0] + len(indices)))
            first_steps.append(indices[0])
    assert len(set(first_steps)) == len(first_steps)
    # Every run switched its arm in over the baseline settings, then reset.
    fixed = {
        "controller": "fixed",
        "fixed_cap_tokens": 16,
        "itl_slo_ms": 40.0,
        "gain": 0.5,
    }
    assert fake_server.patches.count(fixed) == 3
    assert fake_server.num_resets >= 9
    assert fake_server.patches[-1] == {"controller": "dlfp-ct", "gain": 0.5}  # restored
    # No no_slack shedding in any arm, admission's own limit restored at the end.
    assert fake_server.admission_patches == [{"no_slack_check": False}, {"no_slack_check": True}]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["verdict"]["static_arms"] == ["fixed-16"]
    assert (tmp_path / "episodes-frontier.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "episodes-short-long.png").read_bytes()[:4] == b"\x89PNG"


def test_a_rerun_resumes_and_check_recomputes(
    fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    assert gateway_main([*_args(fake_server, tmp_path), "--no-plots"]) == 0
    missing = record_path(tmp_path, 1, "fixed-16")
    missing.unlink()
    num_sent = len(fake_server.requests)
    assert gateway_main([*_args(fake_server, tmp_path), "--no-plots"]) == 0
    assert len(fake_server.requests) == num_sent + 4  # the one run: 2 decoders, 2 arrivals
    assert missing.exists()
    # A failed run is run again.
    failed = record_path(tmp_path, 2, "off")
    record = read_record(failed)
    record.error = "HTTP 429: as if refused"
    write_record(failed, record)
    assert gateway_main([*_args(fake_server, tmp_path), "--no-plots"]) == 0
    assert len(fake_server.requests) == num_sent + 8 and read_record(failed).error is None
    check = ["bench", "episodes", "--results", str(tmp_path), "--check"]
    assert gateway_main(check) == 0
    # Another plan, or other arms, in the same folder: refused.
    assert gateway_main([*_args(fake_server, tmp_path, "--decoders", "3"), "--no-plots"]) == 2
    other_arms = [
        a if a != ",".join(ARMS) else "off,fixed-16" for a in _args(fake_server, tmp_path)
    ]
    assert gateway_main([*other_arms, "--no-plots"]) == 2


def test_the_default_arms_place_the_sentinel_apart_and_reach_the_largest_cap() -> None:
    cpu = {"min_cap_tokens": 8, "max_cap_tokens": 1024, "step_tokens": 8}
    names = default_arm_names(cpu)
    assert names[0] == "off" and "fixed-8" in names and "fixed-1024" in names
    gap = abs(names.index("dlfp-ct") - names.index(SENTINEL))
    assert min(gap, len(names) - gap) >= len(names) // 2 - 1
    cuda = {"min_cap_tokens": 1024, "max_cap_tokens": 6144, "step_tokens": 128}
    assert [n for n in default_arm_names(cuda) if n.startswith("fixed-")] == [
        "fixed-1024", "fixed-2048", "fixed-4096", "fixed-6144",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="outside"):
        check_arm_names(["off", "fixed-12"], cpu)
    with pytest.raises(ValueError, match="once"):
        check_arm_names(["off", "off"], cpu)
    check_arm_names(["fixed-128", "dlfp-ct", "dlfp-ct-max-128"], cpu)
    with pytest.raises(ValueError, match="outside"):
        check_arm_names(["dlfp-ct-max-2048"], cpu)
    with pytest.raises(ValueError, match="unknown arm"):
        check_arm_names(["dlfp-ct-max-a"], cpu)


def test_a_bounded_dlfp_ct_arm_sets_every_cap_within_its_bound() -> None:
    patch = arm_patch("dlfp-ct-max-128", 500.0)
    assert patch == {
        "controller": "dlfp-ct",
        "max_cap_tokens": 128,
        "initial_cap_tokens": 128,
        "fixed_cap_tokens": 128,
        "itl_slo_ms": 500.0,
    }
    # Over the gateway's defaults (initial 256, fixed 128), the caps still validate.
    CapParams(**{k: v for k, v in patch.items() if k != "controller"})


def test_a_rate_loss_arm_sets_the_knees_loss() -> None:
    patch = arm_patch("dlfp-ct-loss-2", 500.0)
    assert patch == {"controller": "dlfp-ct", "step_rate_loss": 0.02, "itl_slo_ms": 500.0}
    CapParams(**{k: v for k, v in patch.items() if k != "controller"})
    for name in ("dlfp-ct-loss-0.02", "dlfp-ct-loss-60"):
        with pytest.raises(ValueError, match="unknown arm"):
            arm_patch(name, None)


def test_the_full_slack_arm_turns_the_knee_off() -> None:
    patch = arm_patch("dlfp-ct-full", 500.0)
    assert patch == {"controller": "dlfp-ct", "step_rate_loss": 0.0, "itl_slo_ms": 500.0}
    assert CapParams(step_rate_loss=patch["step_rate_loss"]).step_rate_loss == 0.0
    check_arm_names(["fixed-128", "dlfp-ct", "dlfp-ct-full"], {})


def test_the_shedding_arm_turns_no_slack_shedding_on_for_its_runs_alone(
    fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    arms = ("dlfp-ct", "dlfp-ct-shed")
    assert gateway_main(_args(fake_server, tmp_path, "--arms", ",".join(arms))) == 0
    records = read_records(tmp_path)
    runs = sorted(
        (r for by_arm in records.values() for r in by_arm.values()),
        key=lambda r: (r.episode, r.position),
    )
    assert [r.arm for r in runs[:2]] == [arms[i] for i in balanced_order(2, 0)]
    expected = [{"no_slack_check": False}]
    for run in runs:
        wanted = {"no_slack_check": run.arm == "dlfp-ct-shed"}
        if wanted != expected[-1]:
            expected.append(wanted)
    expected.append({"no_slack_check": True})  # the fake's own limit, restored
    assert fake_server.admission_patches == expected
    assert arm_patch("dlfp-ct-shed", 40.0) == {"controller": "dlfp-ct", "itl_slo_ms": 40.0}
    plan = json.loads((tmp_path / "episodes.json").read_text())
    assert plan["arm_admission_patches"] == {"dlfp-ct-shed": {"no_slack_check": True}}


def test_no_slo_check_turns_admissions_ttft_check_off_for_the_whole_run(
    fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """With ``--no-slo-check`` every run goes with admission's TTFT check off (recorded in
    the plan), and the gateway's own setting is restored at the end."""
    argv = _args(fake_server, tmp_path, "--arms", "fixed-16,dlfp-ct", "--no-slo-check")
    assert gateway_main(argv) == 0
    off = {"no_slack_check": False, "slo_check": False}
    assert fake_server.admission_patches == [off, {"no_slack_check": True, "slo_check": True}]
    plan = json.loads((tmp_path / "episodes.json").read_text())
    assert plan["admission_patch"] == off


def test_arrival_offsets_are_jittered_by_the_seed_and_keep_their_order() -> None:
    shape = EpisodeShape()
    offsets = [episode_offsets(shape, seed) for seed in range(200)]
    assert episode_offsets(shape, 7) == offsets[7]  # the seed's alone: every arm alike
    for base, jitter in zip(shape.offsets_s, zip(*offsets, strict=True), strict=True):
        moves = [o - base for o in jitter]
        assert 0.0 <= min(moves) < 0.05 and 0.45 < max(moves) < 0.5  # the whole range
    assert all(list(o) == sorted(o) for o in offsets)
    with pytest.raises(ValueError, match="smallest gap"):
        EpisodeShape(offsets_s=(0.0, 0.2), arrival_kinds=("long", "short"), offset_jitter_s=0.3)
    assert episode_offsets(EpisodeShape(offset_jitter_s=0.0), 3) == shape.offsets_s
    with pytest.raises(ValueError, match="finite"):
        EpisodeShape(offsets_s=(0.0,), arrival_kinds=("long",), offset_jitter_s=math.inf)
    with pytest.raises(ValueError, match="smallest gap"):  # equal offsets: no draw
        EpisodeShape(offsets_s=(0.0, 0.0), arrival_kinds=("long", "short"))


def test_a_folder_recorded_at_fixed_offsets_resumes_only_at_fixed_offsets(
    tmp_path: Path,
) -> None:
    plan = {"shape": asdict(EpisodeShape()), "order": "balanced", "counter": "c"}
    old = json.loads(json.dumps(plan))
    del old["shape"]["offset_jitter_s"]  # written before the draw
    (tmp_path / "episodes.json").write_text(json.dumps(old))
    with pytest.raises(ValueError, match="shape"):
        _check_plan(tmp_path / "episodes.json", plan)
    fixed = plan | {"shape": asdict(EpisodeShape(offset_jitter_s=0.0))}
    assert _check_plan(tmp_path / "episodes.json", fixed)["shape"]["offset_jitter_s"] == 0.0


def test_the_tight_objective_rounds_down_and_keeps_its_floor() -> None:
    found = conditions(500.0, 32.0)  # 3 x 32 = 96 ms: 90, not 100
    assert sorted(c["itl_slo_ms"] for c in found.values()) == [90.0, 90.0, 500.0, 500.0]
    assert {c["itl_slo_ms"] for c in conditions(500.0, 2.0).values()} == {10.0, 500.0}


def test_the_thin_slack_condition_is_17_decode_steps_of_8_streams() -> None:
    found = conditions(500.0, 32.0, thin_decode_step_ms=170.0)  # 1.7 x 170 = 289: 280
    assert found["slo280-d8-thin"] == {"itl_slo_ms": 280.0, "num_decoders": 8}
    assert len(found) == 5 and len(conditions(500.0, 32.0)) == 4


def _record(
    arm: str, episode: int, gap_s: float, ttft_short_s: float, ttft_long_s: float
) -> EpisodeRecord:
    """A hand-made run: one decoder ticking every ``gap_s`` from 0 to 10 s; the window is
    2 s to 6 s; a short and a long arrival with the given TTFTs."""
    decoder = RequestRecord(0, "decoder", False, "", "", 0, 1000, 0.0, send_s=0.0)
    n = int(10 / gap_s)
    decoder.chunk_s = [0.5 + i * gap_s for i in range(n)]
    decoder.chunk_num_tokens = [1] * n
    decoder.status = "ok"
    arrivals = []
    for index, (kind, ttft) in enumerate((("short", ttft_short_s), ("long", ttft_long_s))):
        arrival = RequestRecord(index, kind, False, "", "", 0, 8, 2.0, send_s=2.0)
        arrival.chunk_s, arrival.chunk_num_tokens, arrival.status = [2.0 + ttft], [1], "ok"
        arrivals.append(arrival)
    return EpisodeRecord(
        episode, arm, 0, f"{episode:012x}", None, None, 0.0, [decoder], arrivals,
        lead_start_s=0.5, window_start_s=2.0, window_end_s=6.0, cut_s=10.0,
    )  # fmt: skip


def test_window_gaps_are_those_that_overlap_the_window() -> None:
    record = RequestRecord(0, "decoder", False, "", "", 0, 9, 0.0, send_s=0.0)
    record.chunk_s = [1.0, 1.9, 2.5, 3.0, 6.5, 7.0]
    record.chunk_num_tokens = [1, 1, 1, 2, 1, 1]
    # 1.0-1.9 ends before the window; 1.9-2.5 straddles its start; 3.0-6.5 its end.
    # The chunk of two tokens is one wait: no zero gap.
    assert window_gaps(record, 2.0, 6.0) == pytest.approx([0.6, 0.5, 3.5])
    # A stream stalled from 3.0 s to the cut at 8 s: that open wait counts.
    record.chunk_s, record.chunk_num_tokens = [1.9, 2.5, 3.0], [1, 1, 1]
    assert window_gaps(record, 2.0, 6.0, cut_s=8.0) == pytest.approx([0.6, 0.5, 5.0])


def test_the_verdict_takes_the_feasible_static_cap_with_the_lowest_ttft() -> None:
    # fixed-8: small gaps, slow; fixed-64: within 100 ms, faster; fixed-512: gaps of
    # 200 ms, fastest but infeasible; dlfp-ct: within, 10% slower than fixed-64 on short.
    plan = {
        "fixed-8": (0.02, 3.0, 9.0),
        "fixed-64": (0.08, 1.0, 4.0),
        "fixed-512": (0.2, 0.5, 2.0),
        "dlfp-ct": (0.05, 1.1, 4.0),
        "dlfp-ct-repeat": (0.05, 1.1, 4.0),
    }
    records = {
        arm: {e: _record(arm, e, gap, short * (1 + e / 10), long) for e in range(4)}
        for arm, (gap, short, long) in plan.items()
    }
    records["fixed-64"][3].error = "a decoding stream failed"
    summary = summarize_episodes(records, itl_slo_ms=100.0)
    verdict = summary["verdict"]
    assert verdict["static_arms"] == ["fixed-8", "fixed-64", "fixed-512"]
    assert verdict["feasible_static_arms"] == ["fixed-8", "fixed-64"]
    assert verdict["best_static_arm"] == "fixed-64"
    arms = summary["arms"]
    assert arms["fixed-64"]["episodes"] == [0, 1, 2] and "3" in arms["fixed-64"]["failed_episodes"]
    assert arms["fixed-512"]["window_p99_gap_ms"] == pytest.approx(200.0)
    assert arms["fixed-512"]["stream_goodput"] == 0.0 and arms["fixed-8"]["stream_goodput"] == 1
    assert arms["fixed-8"]["lone_decode_step_episode_mean"]["mean"] == pytest.approx(20.0)
    short = verdict["ratios"]["dlfp-ct"]["ttft_short"]
    assert short["n"] == 3 and short["ratio"] == pytest.approx(1.1)  # paired, episode 3 out
    overall = verdict["ratios"]["dlfp-ct"]["ttft"]
    assert overall["low"] <= overall["ratio"] <= overall["high"]
    assert verdict["sentinel"]["aim_met"] is True
    assert verdict["sentinel"]["ttft"]["ratio"] == pytest.approx(1.0)
    assert verdict["incomplete_arms"] == ["fixed-64"]


def test_where_no_static_cap_is_feasible_the_reference_has_the_tightest_gaps() -> None:
    plan = {"fixed-8": (0.02, 3.0, 9.0), "fixed-64": (0.08, 1.0, 4.0), "dlfp-ct": (0.03, 1.5, 9.9)}
    records = {
        arm: {e: _record(arm, e, gap, short * (1 + e / 10), long) for e in range(4)}
        for arm, (gap, short, long) in plan.items()
    }
    verdict = summarize_episodes(records, itl_slo_ms=10.0)["verdict"]
    assert verdict["feasible_static_arms"] == [] and verdict["best_static_arm"] is None
    assert verdict["reference_arm"] == "fixed-8"
    assert verdict["ratios"]["dlfp-ct"]["ttft_short"]["ratio"] == pytest.approx(0.5)
    assert verdict["ratios"]["dlfp-ct"]["ttft_long"]["ratio"] == pytest.approx(1.1)


def test_a_run_that_sent_other_prompts_is_left_out() -> None:
    records = {arm: {e: _record(arm, e, 0.05, 1.0, 4.0) for e in range(3)} for arm in ARMS}
    for by_episode in records.values():
        for record in by_episode.values():
            record.prompts_sha256 = "same"
    records["off"][1].prompts_sha256 = "other"
    arms = summarize_episodes(records, itl_slo_ms=100.0)["arms"]
    assert arms["off"]["episodes"] == [0, 2] and "differ" in arms["off"]["failed_episodes"]["1"]
    assert arms["dlfp-ct"]["episodes"] == [0, 1, 2]


@pytest.mark.parametrize("num_arms", [2, 3, 4, 5, 6])
def test_the_balanced_order_puts_every_arm_in_every_position_and_after_every_other(
    num_arms: int,
) -> None:
    """Over a cycle of episodes (one of n rows for an even n, two for an odd n) every arm
    runs in every position equally often, and follows every other arm equally often: no
    arm always runs first, and no pair always runs in one order."""
    cycle = num_arms if num_arms % 2 == 0 else 2 * num_arms
    rows = [balanced_order(num_arms, e) for e in range(cycle)]
    assert all(sorted(row) == list(range(num_arms)) for row in rows)
    for position in range(num_arms):
        counts = [sum(row[position] == arm for row in rows) for arm in range(num_arms)]
        assert len(set(counts)) == 1, (position, counts)
    follows = [pair for row in rows for pair in itertools.pairwise(row)]
    pairs = [(a, b) for a in range(num_arms) for b in range(num_arms) if a != b]
    assert len({follows.count(pair) for pair in pairs}) == 1
