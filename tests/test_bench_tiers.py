"""``bench tiers``: the workload, the picks from the calibration, the per-request verdict,
and a whole run against the FAKE server (no timing is judged: the fake has none)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.lib.records import RequestRecord
from bench.lib.tokens import load_counter
from bench.tiers.calibrate import plan_from_json
from bench.tiers.run import TierRun, read_runs
from bench.tiers.stats import is_met, pick_static_arms, summarize_tiers
from bench.tiers.workload import PHASES, arrivals, plan_from, requests
from gateway.cli import main as gateway_main
from tests.fake_openai_server import ADMIN_TOKEN, FakeOpenAIServer

PLAN = plan_from(decode_step_ms_8=36.0, prefill_tokens_per_s=530.0, phase_s=4.0, tail_s=2.0)


def _record(
    index: int, first_s: float | None, gaps_s: list[float], status: str = "ok"
) -> RequestRecord:
    record = RequestRecord(index, "x", False, "", "", 0, 8, 0.0, send_s=0.0, status=status)
    if first_s is not None:
        record.chunk_s = [first_s]
        for gap in gaps_s:
            record.chunk_s.append(record.chunk_s[-1] + gap)
        record.chunk_num_tokens = [1] * len(record.chunk_s)
    return record


def test_the_objectives_follow_the_machine_and_the_phases_change_the_mix() -> None:
    interactive, long, batch = PLAN.tiers
    assert interactive.itl_slo_ms == 80.0  # 2 x 36 ms, up to 10 ms
    assert long.prompt_tokens == 398 and long.ttft_slo_ms == 6000.0
    assert batch.itl_slo_ms == long.itl_slo_ms == 1080.0
    sent = arrivals(PLAN, seed=1)
    assert sent == arrivals(PLAN, seed=1) and sent != arrivals(PLAN, seed=2)
    assert [p.name for p in PLAN.phases] == list(PHASES)
    # Every arrival falls in its phase's span.
    for send_s, _, phase in sent:
        assert PHASES.index(phase) * 4.0 <= send_s < (PHASES.index(phase) + 1) * 4.0
    rates = {p.name: p.rates_rps for p in PLAN.phases}
    assert rates["chat"]["interactive"] > 5 * rates["documents"]["interactive"]
    assert rates["documents"]["long"] > 4 * rates["chat"]["long"]
    assert rates["documents"]["batch"] > 4 * rates["chat"]["batch"]


def test_a_request_meets_its_objectives_only_if_served_in_time_with_few_late_gaps() -> None:
    assert is_met(_record(0, 1.0, [0.05] * 30), 2000, 90)
    assert not is_met(_record(0, 2.5, [0.05] * 30), 2000, 90)  # TTFT over
    assert not is_met(_record(0, 1.0, [0.05] * 29 + [0.2]), 2000, 90)  # 1 late in 30 gaps
    assert is_met(_record(0, 1.0, [0.05] * 199 + [0.2]), 2000, 90)  # 1 late in 200
    assert not is_met(_record(0, None, [], status="failed"), 2000, 90)  # refused or cut


def _run(arm: str, met_by_phase: dict[str, bool], seed: int = 0) -> TierRun:
    """Two requests per phase, both met or both missed (a TTFT of 1 s or 99 s)."""
    phases = [p for p in PHASES for _ in range(2)]
    return TierRun(
        seed=seed,
        arm=arm,
        position=0,
        nonce="n",
        admin_patch={},
        started_unix_s=0.0,
        tiers=["interactive"] * len(phases),
        phases=phases,
        requests=[_record(i, 1.0 if met_by_phase[p] else 99.0, []) for i, p in enumerate(phases)],
    )


def test_the_calibration_picks_the_whole_run_best_and_each_phases_best() -> None:
    calibration = {
        "fixed-16": _run("fixed-16", {"chat": True, "documents": False, "batch": False}),
        "fixed-64": _run("fixed-64", {"chat": True, "documents": False, "batch": True}),
        "fixed-256": _run("fixed-256", {"chat": False, "documents": True, "batch": True}),
    }
    picks = pick_static_arms(calibration, PLAN)
    # 64 and 256 tie over the whole run: the smaller cap, gentler on the streams.
    assert picks["whole_run"] == "fixed-64"
    assert picks["by_phase"] == {"chat": "fixed-16", "documents": "fixed-256", "batch": "fixed-64"}
    assert picks["phase_caps_ratio"] == 16
    measured = {
        1: {
            "fixed-16": _run("fixed-16", {"chat": True, "documents": False, "batch": False}, 1),
            "fixed-64": _run("fixed-64", {"chat": True, "documents": False, "batch": True}, 1),
            "fixed-256": _run("fixed-256", {"chat": False, "documents": True, "batch": True}, 1),
            "dlfp-ct": _run("dlfp-ct", {"chat": True, "documents": True, "batch": False}, 1),
        }
    }
    summary = summarize_tiers(measured, PLAN, picks)
    assert summary["per_seed"]["1"]["ceiling"] == 1.0  # each phase in its best arm
    assert summary["pooled"]["dlfp-ct"]["goodput"] == 4 / 6
    assert summary["pooled"]["dlfp-ct"]["vs_baseline"]["diff"] == 0.0
    assert summary["pooled"]["dlfp-ct"]["of_ceiling"] == 4 / 6


def test_a_whole_run_against_the_fake_fixes_its_arms_before_measuring(
    fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    args = ["bench", "tiers", "--base-url", fake_server.base_url, "--admin-token", ADMIN_TOKEN,
            "--results", str(tmp_path), "--seeds", "1", "--caps", "16,64",
            "--phase-s", "0.6", "--tail-s", "1"]  # fmt: skip
    assert gateway_main(args) == 0
    calibration = json.loads((tmp_path / "calibration.json").read_text())
    picks = calibration["picks"]
    plan = json.loads((tmp_path / "tiers.json").read_text())
    static = {picks["whole_run"], *picks["by_phase"].values()}
    assert set(plan["arms"]) == static | {"dlfp-ct", "dlfp", "off"}
    runs = read_runs(tmp_path)[1]
    assert set(runs) == set(plan["arms"])
    first_measured = min(run.started_unix_s for run in runs.values())
    for path in (tmp_path / "calibration").glob("*.json.gz"):
        assert path.stat().st_mtime <= first_measured  # calibrated before the measured run
    # Every request carried its tier's objectives; every arm sent the same requests.
    slo = {t["name"]: (t["ttft_slo_ms"], t["itl_slo_ms"]) for t in calibration["plan"]["tiers"]}
    tiered = [b for b in fake_server.requests if "ttft_slo_ms" in b]
    assert tiered and all((b["ttft_slo_ms"], b["itl_slo_ms"]) in slo.values() for b in tiered)
    counts = {len(run.requests) for run in runs.values()}
    assert len(counts) == 1
    expected = requests(plan_from_json(calibration["plan"]), 1, load_counter(None))
    assert counts == {len(expected)}
    assert all(r.status == "ok" for run in runs.values() for r in run.requests)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["picks"] == picks and "dlfp-ct" in summary["pooled"]
    assert (tmp_path / "tiers-goodput.png").read_bytes()[:4] == b"\x89PNG"
    assert gateway_main(["bench", "tiers", "--results", str(tmp_path), "--check"]) == 0
