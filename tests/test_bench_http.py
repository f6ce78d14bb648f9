"""The benchmark harness against a FAKE OpenAI streaming server (quick tier, no engine).

The fake and its ``fake_server`` fixture live in ``tests/fake_openai_server.py``.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from dataclasses import replace
from pathlib import Path

import pytest

from bench.lib.client import ClientSettings
from bench.lib.loadgen import Arm, RunConfig, run_all
from bench.lib.records import find_trials, read_trial, trial_path
from bench.lib.tokens import CharCounter
from bench.lib.workload import WorkloadConfig
from gateway.cli import main as gateway_main
from tests.fake_openai_server import ADMIN_TOKEN, MODEL, FakeOpenAIServer


def _run_config(
    fake: FakeOpenAIServer, results: Path, arms: tuple[Arm, ...], seeds: tuple[int, ...] = (801,)
) -> RunConfig:
    workload = WorkloadConfig(
        num_requests=4, num_warmup=1, rate_rps=40.0, long_min_tokens=60, long_max_tokens=90
    )
    client = ClientSettings(base_url=fake.base_url + "/v1", model=MODEL, max_tokens=6)
    return RunConfig(
        results,
        arms,
        seeds,
        workload,
        client,
        admin_token=ADMIN_TOKEN,
        metrics_interval_s=0.02,
        ready_timeout_s=10,
    )


def test_trial_records_every_request_exactly(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    fake_server.tokens_per_chunk = 2
    fake_server.sends_keepalive = True
    arm = Arm("dlfp-ct", {"controller": "dlfp-ct"})
    written = asyncio.run(run_all(_run_config(fake_server, tmp_path, (arm,)), CharCounter()))
    assert written == [tmp_path / "dlfp-ct" / "seed-801.jsonl.gz"]
    trial = read_trial(written[0])
    assert fake_server.patches == [{"controller": "dlfp-ct", "gain": 0.5}]  # on the baseline
    assert len(trial.requests) == 5 and [r.is_warmup for r in trial.requests][:2] == [True, False]
    for record in trial.requests:
        assert record.status == "ok", record.error
        assert record.chunk_num_tokens == [2, 2, 2] and len(record.token_ids or []) == 6
        assert record.send_s is not None and record.send_s >= record.scheduled_s - 1e-3
    body = fake_server.requests[0]
    assert body["ignore_eos"] is True and body["stream_options"] == {"include_usage": True}
    assert body["cache_salt"].startswith("dlfp-bench-dlfp-ct-801-")
    assert trial.samples and "dlfp_controller_cap_tokens" in trial.samples[0].values
    assert trial.header["metrics_available"] is True


def test_token_accounting_fails_a_short_stream(
    fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_server.num_missing_tokens = 1
    asyncio.run(run_all(_run_config(fake_server, tmp_path, (Arm("off"),)), CharCounter()))
    trial = read_trial(tmp_path / "off" / "seed-801.jsonl.gz")
    assert {r.status for r in trial.requests} == {"failed"}
    assert "delivered 5 tokens" in (trial.requests[0].error or "")


def test_resume_skips_a_recorded_trial(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    run = _run_config(fake_server, tmp_path, (Arm("off"),), seeds=(801, 802))
    asyncio.run(run_all(run, CharCounter()))
    first = (tmp_path / "off" / "seed-801.jsonl.gz").read_bytes()
    num_requests = len(fake_server.requests)
    (tmp_path / "off" / "seed-802.jsonl.gz").unlink()  # as if interrupted during seed 802
    written = asyncio.run(run_all(run, CharCounter()))
    assert written == [tmp_path / "off" / "seed-802.jsonl.gz"]
    assert len(fake_server.requests) == num_requests + 5
    assert (tmp_path / "off" / "seed-801.jsonl.gz").read_bytes() == first


def test_cli_runs_arms_then_compares(
    fake_server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = [
        "--base-url",
        fake_server.base_url,
        "--seeds",
        "801,802",
        "--num-requests",
        "3",
        "--warmup",
        "1",
        "--rate",
        "40",
        "--max-tokens",
        "5",
        "--long-min-tokens",
        "40",
        "--long-max-tokens",
        "80",
        "--results",
        str(tmp_path),
        "--admin-token",
        ADMIN_TOKEN,
        "--metrics-interval-s",
        "0.02",
    ]
    off = '{"controller":"off"}'
    arms = ["--arm", f"off={off}", "--arm", f"off-repeat={off}", "--arm", "dlfp-ct"]
    patch = ["--admin-patch", '{"controller":"dlfp-ct"}', "--calibrate", "0.5"]
    assert gateway_main(["bench", *common, *arms, *patch]) == 0
    # The fake endpoint prefills instantly: calibrated, but nothing to shrink.
    calibration = json.loads((tmp_path / "calibration.json").read_text())
    assert calibration["scale"] == 1.0 and len(calibration["probe_ttft_s"]) == 3
    assert json.loads((tmp_path / "host.json").read_text())["cpu_model"]
    assert sorted(find_trials(tmp_path)) == ["dlfp-ct", "off", "off-repeat"]
    # Seed by seed, arms interleaved; each arm switched in by its own patch or --admin-patch.
    # The arm order rotates by one per seed, and every trial resets the controller.
    assert [p["controller"] for p in fake_server.patches] == [
        *("off", "off", "dlfp-ct"),
        *("off", "dlfp-ct", "off"),
    ]
    assert fake_server.num_resets == 6
    # Every arm's patch applies to the settings before the first arm, not the last arm's.
    assert all(p["gain"] == 0.5 for p in fake_server.patches)
    assert json.loads((tmp_path / "baseline-settings.json").read_text())["gain"] == 0.5
    trial = read_trial(trial_path(tmp_path, "dlfp-ct", 801))
    assert trial.steps and all(s["predicted_busy_ms"] is not None for s in trial.steps)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["arms"]["off"]["pooled"]["num_ok"] == 6
    for png in ("itl-cdf.png", "cap-off.png", "cap-dlfp-ct.png", "cost-model-dlfp-ct.png"):
        assert (tmp_path / "plots" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "ITL p50 ms" in capsys.readouterr().out

    args = [
        "bench",
        "compare",
        "--results",
        str(tmp_path),
        "--baseline",
        "off",
        "--candidate",
        "dlfp-ct",
    ]
    assert gateway_main(args) == 0
    out = capsys.readouterr().out
    assert "itl_p99_ms" in out and "output agreement: 100.0% identical of 6 pairs" in out
    assert "run-to-run (off-repeat vs off): 100.0%" in out
    result = json.loads((tmp_path / "compare-dlfp-ct-vs-off.json").read_text())
    assert result["agreement"]["workload_matches"] is True


def test_wrong_model_is_a_failed_request(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    args = [
        "bench",
        "--base-url",
        fake_server.base_url,
        "--model",
        "nope",
        "--seeds",
        "1",
        "--num-requests",
        "2",
        "--warmup",
        "0",
        "--rate",
        "50",
        "--max-tokens",
        "3",
        "--results",
        str(tmp_path),
        "--no-plots",
        "--metrics-interval-s",
        "0",
    ]
    assert gateway_main(args) == 0
    trial = read_trial(tmp_path / "default" / "seed-1.jsonl.gz")
    assert [r.http_status for r in trial.requests] == [404, 404]
    assert all(r.status == "failed" and "HTTP 404" in (r.error or "") for r in trial.requests)


def sweep_args(base_url: str, results: Path, rates: str, num_requests: int) -> list[str]:
    """``bench sweep`` against the fake endpoint: one seed, tiny prompts, no polling."""
    return [
        "bench",
        "sweep",
        "--rates",
        rates,
        "--base-url",
        base_url,
        "--seeds",
        "1",
        "--num-requests",
        str(num_requests),
        "--warmup",
        "0",
        "--max-tokens",
        "3",
        "--long-min-tokens",
        "40",
        "--long-max-tokens",
        "80",
        "--admin-token",
        ADMIN_TOKEN,
        "--results",
        str(results),
        "--metrics-interval-s",
        "0",
    ]


def test_sweep_runs_each_rate_and_reports_capacity(
    fake_server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        *sweep_args(fake_server.base_url, tmp_path, "40,20", 4),
        "--arm",
        'off={"controller":"off"}',
        "--arm",
        'dlfp-ct={"controller":"dlfp-ct"}',
    ]
    assert gateway_main(args) == 0
    assert sorted(p.name for p in tmp_path.glob("rate-*")) == ["rate-20", "rate-40"]
    # Rates run lowest first; the arm order rotates by one per rate (one seed here).
    assert [p["controller"] for p in fake_server.patches] == ["off", "dlfp-ct", "dlfp-ct", "off"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    for arm in ("off", "dlfp-ct"):
        entry = summary["arms"][arm]
        assert sorted(entry["rates"]) == ["20", "40"]
        # The fake endpoint meets every SLO: capacity is only bounded below.
        assert (entry["capacity_rps"], entry["capacity_bound"]) == (40.0, "at_least")
    for png in ("goodput-vs-rate.png", "latency-vs-rate.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "capacity >= 40 request/s (at_least)" in capsys.readouterr().out
    # A rerun resumes: every trial is recorded, nothing is sent again.
    num_sent = len(fake_server.requests)
    capsys.readouterr()
    assert gateway_main([*args, "--markdown"]) == 0
    assert len(fake_server.requests) == num_sent
    table = capsys.readouterr().out
    assert "| off | >= 40 | 20 | 4 | 100% | 0 / 0 / 0 / 0 |" in table
    assert "|  |  | 40 | 4 | 100% | 0 / 0 / 0 / 0 |" in table
    # A run resumed at a new rate with --rotate 1 starts with the other arm.
    num_patches = len(fake_server.patches)
    assert gateway_main([*args, "--rates", "10", "--rotate", "1"]) == 0
    assert [p["controller"] for p in fake_server.patches[num_patches:]] == ["dlfp-ct", "off"]


def test_sweep_stop_below_skips_an_arm_at_higher_rates_once_it_misses(
    fake_server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An ITL objective of a microsecond: every request of the fake endpoint misses it.
    args = [
        *sweep_args(fake_server.base_url, tmp_path, "20,40", 3),
        "--stop-below",
        "0.5",
        "--itl-slo-ms",
        "0.001",
        "--arm",
        'off={"controller":"off"}',
    ]
    assert gateway_main(args) == 0
    assert len(fake_server.requests) >= 3
    assert list((tmp_path / "rate-20").glob("off/seed-*.jsonl.gz"))
    assert not list((tmp_path / "rate-40").glob("off/seed-*.jsonl.gz"))
    entry = json.loads((tmp_path / "summary.json").read_text())["arms"]["off"]
    assert sorted(entry["rates"]) == ["20"]
    assert entry["capacity_bound"] == "below_lowest_rate"
    assert "off: missed at a lower rate; not run at 40" in capsys.readouterr().err


def test_sweep_stop_below_adds_no_seeds_above_a_rate_the_arm_missed(
    fake_server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every request misses a microsecond ITL objective; seed 1 is recorded at both rates.
    args = [
        *sweep_args(fake_server.base_url, tmp_path, "20,40", 3),
        "--itl-slo-ms",
        "0.001",
        "--arm",
        'off={"controller":"off"}',
    ]
    assert gateway_main(args) == 0
    capsys.readouterr()
    assert gateway_main([*args, "--seeds", "1,2", "--stop-below", "0.5"]) == 0
    # Seed 2 fills in the lowest rate; at 40/s it could not move the capacity.
    assert sorted(p.name for p in (tmp_path / "rate-20" / "off").glob("seed-*.jsonl.gz")) == [
        "seed-1.jsonl.gz",
        "seed-2.jsonl.gz",
    ]
    assert [p.name for p in (tmp_path / "rate-40" / "off").glob("seed-*.jsonl.gz")] == [
        "seed-1.jsonl.gz"
    ]
    assert "off: missed at a lower rate; not run at 40" in capsys.readouterr().err
    # The pooled capacity is judged only where both seeds ran; each seed has its own.
    entry = json.loads((tmp_path / "summary.json").read_text())["arms"]["off"]
    assert entry["capacity_rates"] == ["20"]
    assert sorted(entry["capacity_by_seed"]) == ["1", "2"]


def test_sweep_stop_below_counts_a_met_rate_only_if_it_holds_every_seed(
    fake_server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arm = ["--arm", 'off={"controller":"off"}']
    assert gateway_main([*sweep_args(fake_server.base_url, tmp_path, "40", 3), *arm]) == 0
    args = [*sweep_args(fake_server.base_url, tmp_path, "20,40", 3), "--stop-below", "0.9"]
    assert gateway_main([*args, "--seeds", "1,2", *arm]) == 0
    # 40/s was met by seed 1 alone, which says nothing of seeds 1 and 2 pooled: 20/s runs.
    for rate in ("rate-20", "rate-40"):
        seeds = sorted(p.name for p in (tmp_path / rate / "off").glob("seed-*.jsonl.gz"))
        assert seeds == ["seed-1.jsonl.gz", "seed-2.jsonl.gz"]
    assert "not run at 20" not in capsys.readouterr().err


def test_sweep_stop_below_must_be_a_goodput_at_most_the_target(tmp_path: Path) -> None:
    args = ["bench", "sweep", "--rates", "1", "--base-url", "http://127.0.0.1:9"]
    assert gateway_main([*args, "--stop-below", "0.95", "--results", str(tmp_path)]) == 2


def test_sweep_stop_below_skips_a_rate_under_one_the_arm_already_met(
    fake_server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arm = ["--arm", 'off={"controller":"off"}']
    assert gateway_main([*sweep_args(fake_server.base_url, tmp_path, "40", 3), *arm]) == 0
    num_sent = len(fake_server.requests)
    args = [*sweep_args(fake_server.base_url, tmp_path, "20,40", 3), "--stop-below", "0.9"]
    assert gateway_main([*args, *arm]) == 0
    # The fake endpoint met every SLO at 40/s: 20/s cannot move the capacity.
    assert len(fake_server.requests) == num_sent
    assert not (tmp_path / "rate-20").exists()
    assert "off: met at a higher rate; not run at 20" in capsys.readouterr().err


def test_resume_counts_an_uncompressed_record_and_force_replaces_it(
    fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    run = _run_config(fake_server, tmp_path, (Arm("off"),))
    asyncio.run(run_all(run, CharCounter()))
    compressed = tmp_path / "off" / "seed-801.jsonl.gz"
    plain = compressed.with_suffix("")  # a trial recorded before records were compressed
    plain.write_bytes(gzip.decompress(compressed.read_bytes()))
    compressed.unlink()
    assert asyncio.run(run_all(run, CharCounter())) == []
    assert asyncio.run(run_all(replace(run, force=True), CharCounter())) == [compressed]
    assert not plain.exists() and read_trial(compressed).arm == "off"


STUDY = """
about = "a study of the fake endpoint"
[options]
num_requests = 3
warmup = 0
max_tokens = 3
long_min_tokens = 40
long_max_tokens = 80
seeds = [1]
rates = [20]
[arms]
off = { controller = "off" }
dlfp-ct = { controller = "dlfp-ct" }
fixed-8 = { controller = "fixed", fixed_cap_tokens = 8 }
[[parts]]
name = "pair"
arms = ["off", "dlfp-ct"]
[[parts]]
name = "more"
arms = ["fixed-8"]
seeds = [1, 2]
rates = [20, 40]
"""


def test_a_study_part_gives_the_arms_rates_and_seeds(
    fake_server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = tmp_path / "study.toml"
    study.write_text(STUDY)
    results = tmp_path / "results"
    common = ["--base-url", fake_server.base_url, "--admin-token", ADMIN_TOKEN]
    common += ["--metrics-interval-s", "0", "--no-plots", "--results", str(results)]
    args = ["bench", "sweep", "--study", str(study), *common]
    assert gateway_main(args) == 2  # two parts: which one?
    assert "--part one of pair, more" in capsys.readouterr().err
    assert gateway_main([*args, "--part", "pair"]) == 0
    assert sorted(find_trials(results / "rate-20")) == ["dlfp-ct", "off"]
    assert {p["controller"] for p in fake_server.patches} == {"off", "dlfp-ct"}
    # The part's own seeds and rates win over the study's; the command line over both.
    assert gateway_main([*args, "--part", "more", "--seeds", "3"]) == 0
    assert sorted(find_trials(results / "rate-40")["fixed-8"]) == [3]
    assert fake_server.patches[-1] == {"controller": "fixed", "fixed_cap_tokens": 8, "gain": 0.5}
    # --arm NAME takes the study's patch; a study of rates is run by bench sweep only.
    assert gateway_main([*args, "--part", "pair", "--arm", "fixed-8", "--seeds", "4"]) == 0
    assert sorted(find_trials(results / "rate-20")["fixed-8"]) == [3, 4]  # pair's rates only
    assert sorted(find_trials(results / "rate-40")["fixed-8"]) == [3]
    capsys.readouterr()
    assert gateway_main(["bench", "--study", str(study), "--part", "pair", *common]) == 2
    assert "run it with bench sweep" in capsys.readouterr().err
