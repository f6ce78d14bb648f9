"""The benchmark harness without a server (quick tier): workload, accounting, statistics."""

from __future__ import annotations

import gzip
import itertools
import json
import random
import zlib
from pathlib import Path

import numpy as np
import pytest

from bench.lib.compare import compare_arms, output_agreement, paired_ci, t_quantile_975
from bench.lib.plots import arm_styles, controller_cap, itl_cdf
from bench.lib.records import (
    MetricsSample,
    RequestRecord,
    Trial,
    append_jsonl,
    find_trials,
    open_text,
    read_jsonl,
    read_trial,
    recorded_trial,
    trial_path,
    write_trial,
)
from bench.lib.stats import SLO, meets_slo, percentile, request_gaps, slo_miss, summarize
from bench.lib.stream import accounting_error, apply_event, parse_data
from bench.lib.tokens import CharCounter
from bench.lib.workload import WorkloadConfig, build_workload, poisson_arrivals

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class WordCounter:
    """A stand-in tokenizer: one token per whitespace-separated word."""

    name = "words"

    def count(self, text: str) -> int:
        return len(text.split())


# --- workload ---


def test_poisson_arrivals_reproducible_per_seed_and_differ_across_seeds() -> None:
    a, b = poisson_arrivals(801, 0.2, 50), poisson_arrivals(801, 0.2, 50)
    assert a == b
    assert a != poisson_arrivals(802, 0.2, 50)
    assert a[0] == 0.0 and all(x < y for x, y in itertools.pairwise(a))
    many = poisson_arrivals(7, 2.0, 4001)
    assert many[-1] / 4000 == pytest.approx(0.5, rel=0.1)  # mean gap 1/rate


@pytest.mark.parametrize("counter", [CharCounter(), WordCounter()], ids=["chars", "words"])
def test_long_prompts_distinct_and_within_the_token_range(counter: CharCounter) -> None:
    config = WorkloadConfig(
        num_requests=40,
        num_warmup=2,
        rate_rps=1.0,
        long_fraction=0.5,
        long_min_tokens=300,
        long_max_tokens=700,
    )
    specs = build_workload(config, 801, counter)
    longs = [s for s in specs if s.kind == "long"]
    shorts = [s for s in specs if s.kind == "short"]
    assert 10 <= len(longs) <= 32 and shorts
    assert len({s.prompt for s in specs}) == len(specs)
    # No two prompts share even their opening (the prefix cache has nothing to reuse).
    assert len({s.prompt[:24] for s in specs}) == len(specs)
    for spec in longs:
        assert 300 <= counter.count(spec.prompt) <= 700
        assert spec.num_prompt_tokens == counter.count(spec.prompt)
    for spec in shorts:
        assert 20 <= counter.count(spec.prompt) <= 120
    assert [s.is_warmup for s in specs[:3]] == [True, True, False]


def test_same_seed_same_workload_in_every_arm() -> None:
    config = WorkloadConfig(num_requests=10, num_warmup=1, rate_rps=0.5)
    first = build_workload(config, 801, CharCounter())
    assert first == build_workload(config, 801, CharCounter())
    other = build_workload(config, 802, CharCounter())
    assert [s.prompt for s in first] != [s.prompt for s in other]
    # The share of long prompts does not move the arrivals.
    mixed = build_workload(WorkloadConfig(10, 1, 0.5, long_fraction=0.9), 801, CharCounter())
    assert [s.scheduled_s for s in mixed] == [s.scheduled_s for s in first]


# --- stream parsing and token accounting ---


def _record(max_tokens: int = 4) -> RequestRecord:
    return RequestRecord(
        index=0,
        kind="short",
        is_warmup=False,
        prompt="p",
        prompt_sha256="x",
        num_prompt_tokens_target=1,
        max_tokens=max_tokens,
        scheduled_s=0.0,
        send_s=0.0,
    )


def _chunk(content: str, **choice: object) -> str:
    return json.dumps(
        {"id": "c1", "choices": [{"index": 0, "delta": {"content": content}, **choice}]}
    )


def test_role_chunk_carries_no_token_and_token_ids_count() -> None:
    role = parse_data(
        json.dumps({"choices": [{"delta": {"role": "assistant", "content": ""}}]}), chat=True
    )
    assert role is not None and not role.is_content
    event = parse_data(_chunk("ab", token_ids=[5, 6]), chat=True)
    assert event is not None and event.is_content and event.num_tokens == 2
    completion = parse_data(
        json.dumps({"choices": [{"text": "x", "finish_reason": None}]}), chat=False
    )
    assert completion is not None and completion.is_content and completion.num_tokens is None
    assert parse_data("[DONE]", chat=True) is None


def _feed(record: RequestRecord, data: str, t_s: float) -> None:
    event = parse_data(data, chat=True)
    assert event is not None
    apply_event(record, event, t_s)


def test_accounting_flags_a_stream_with_the_wrong_count() -> None:
    good, short, lying = _record(), _record(), _record()
    for t, ids in enumerate([[1], [2], [3, 4]]):
        _feed(good, _chunk("t", token_ids=ids), float(t))
    for t in range(3):
        _feed(short, _chunk("t", token_ids=[t]), float(t))
        _feed(lying, _chunk("t"), float(t))
    usage = json.dumps({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}})
    for record in (good, short, lying):
        _feed(record, usage, 9.0)
    assert accounting_error(good, 4) is None
    assert "delivered 3 tokens" in (accounting_error(short, 4) or "")
    assert accounting_error(lying, 4) is None  # 3 text chunks for 4 tokens: not provably wrong
    assert "usage reports 4" in (accounting_error(good, 5) or "")
    assert "without a usage chunk" in (accounting_error(_record(), 4) or "")
    assert request_gaps(good) == [1.0, 1.0, 0.0]  # the 2-token chunk adds one zero gap


# --- records ---


def _trial(arm: str, seed: int, gaps_s: list[list[float]], ttft_s: float = 0.5) -> Trial:
    records = []
    for index, gaps in enumerate(gaps_s):
        send = float(index)
        times = [send + ttft_s]
        for gap in gaps:
            times.append(times[-1] + gap)
        n = len(times)
        ids = [zlib.crc32(f"{seed}-{index}".encode()) % 1000 + i for i in range(n)]
        records.append(
            RequestRecord(
                index=index,
                kind="short",
                is_warmup=False,
                prompt=f"p{seed}-{index}",
                prompt_sha256=f"h{seed}-{index}",
                num_prompt_tokens_target=3,
                max_tokens=n,
                scheduled_s=send,
                send_s=send,
                chunk_s=times,
                chunk_num_tokens=[1] * n,
                usage_s=times[-1],
                end_s=times[-1],
                status="ok",
                num_prompt_tokens=3,
                usage={"prompt_tokens": 3, "completion_tokens": n},
                text="x" * n,
                token_ids=ids,
            )
        )
    samples = [
        MetricsSample(0.0, {"dlfp_controller_cap_tokens": 256.0}),
        MetricsSample(
            1.0, {"dlfp_controller_cap_tokens": 384.0, "dlfp_controller_observation_seconds": 0.2}
        ),
    ]
    return Trial(arm, seed, {"duration_s": 3.0}, records, samples)


def test_records_round_trip(tmp_path: Path) -> None:
    trial = _trial("off", 801, [[0.1, 0.2], [0.3]])
    trial.requests[1].status, trial.requests[1].error = "failed", "boom"
    path = trial_path(tmp_path, "off", 801)
    write_trial(path, trial)
    assert path.name == "seed-801.jsonl.gz" and not list(path.parent.glob("*.tmp"))
    assert gzip.decompress(path.read_bytes()).startswith(b'{"type": "trial"')
    assert read_trial(path) == trial
    first = path.read_bytes()
    write_trial(path, trial)
    assert path.read_bytes() == first, "the same records, the same bytes (no gzip timestamp)"


def test_records_read_plain_and_compressed_alike(tmp_path: Path) -> None:
    trial = _trial("off", 801, [[0.1]])
    write_trial(tmp_path / "off" / "seed-801.jsonl", trial)  # as results were once written
    write_trial(trial_path(tmp_path, "off", 802), _trial("off", 802, [[0.2]]))
    found = find_trials(tmp_path)
    assert {seed: p.name for seed, p in found["off"].items()} == {
        801: "seed-801.jsonl",
        802: "seed-802.jsonl.gz",
    }
    assert read_trial(found["off"][801]) == trial
    assert recorded_trial(tmp_path, "off", 801) == tmp_path / "off" / "seed-801.jsonl"
    assert recorded_trial(tmp_path, "off", 803) is None
    write_trial(trial_path(tmp_path, "off", 801), trial)
    with pytest.raises(ValueError, match="seed 801 is recorded twice"):
        find_trials(tmp_path)


def test_jsonl_lines_append_to_a_compressed_file(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "machine.jsonl.gz"
    append_jsonl(path, {"run": 1})
    append_jsonl(path, {"run": 2})
    assert [obj for _, obj in read_jsonl(path)] == [{"run": 1}, {"run": 2}]
    with open_text(path) as f:
        assert f.read() == '{"run": 1}\n{"run": 2}\n'


# --- statistics ---


def test_percentiles_match_numpy_and_known_cases() -> None:
    assert percentile([], 50) is None
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([10.0, 0.0], 100) == 10.0
    assert percentile([5.0], 99) == 5.0
    rng = random.Random(4)
    values = [rng.lognormvariate(0, 1) for _ in range(257)]
    for q in (0, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_summary_lone_decode_step_is_the_machine_speed() -> None:
    trial = _trial("off", 801, [[0.1]])
    assert summarize([trial], SLO(1000, 500))["lone_decode_step_ms"] is None
    step = {"num_decoding": 1, "num_prefill_tokens": 0}
    trial.steps = [
        {**step, "busy_ms": 50.0},
        {**step, "busy_ms": 70.0},
        {**step, "busy_ms": 90.0},
        {**step, "num_decoding": 2, "busy_ms": 500.0},  # two decodes: other work
        {**step, "num_prefill_tokens": 8, "busy_ms": 400.0},  # a prefill beside it
    ]
    s = summarize([trial], SLO(1000, 500))
    assert (s["lone_decode_step_ms"], s["num_lone_decode_steps"]) == (70.0, 3)


def test_summary_itl_pooled_and_goodput() -> None:
    # Request 0: gaps 0.1, 0.1, 0.9 (one stall); request 1: gaps 0.1 x3.
    trial = _trial("off", 801, [[0.1, 0.1, 0.9], [0.1, 0.1, 0.1]])
    slo = SLO(ttft_ms=1000, itl_ms=500)
    assert [meets_slo(r, slo) for r in trial.requests] == [False, True]
    # P99 of request 0's own gaps is 0.1 + 0.98 * 0.8 = 0.884 s: still over 500 ms.
    assert not meets_slo(trial.requests[0], SLO(1000, 500, itl_percentile=99))
    assert meets_slo(trial.requests[0], SLO(1000, 1000))
    assert not meets_slo(trial.requests[1], SLO(ttft_ms=400, itl_ms=500))
    assert [slo_miss(r, slo) for r in trial.requests] == ["itl", None]
    assert [slo_miss(r, SLO(400, 500)) for r in trial.requests] == ["both", "ttft"]
    s = summarize([trial], slo)
    assert (s["num_slo_met"], s["num_missed_itl"], s["num_missed_ttft"]) == (1, 1, 0)
    assert s["num_itl_gaps"] == 6
    assert s["itl_p50_ms"] == pytest.approx(100.0)
    assert s["itl_p99_ms"] == pytest.approx(float(np.percentile([0.1] * 5 + [0.9], 99)) * 1000)
    assert s["ttft_p50_ms"] == pytest.approx(500.0)
    # Window: first send 0 s to last end 1 + 0.5 + 0.3 = 1.8 s; 8 tokens.
    assert s["window_s"] == pytest.approx(1.8)
    assert s["output_tps"] == pytest.approx(8 / 1.8)
    assert s["num_slo_met"] == 1 and s["slo_attainment"] == 0.5
    assert s["goodput_rps"] == pytest.approx(1 / 1.8)
    assert s["cap_mean_tokens"] == 320.0


def test_paired_ci_reproduces_the_papers_interval() -> None:
    # The paper: P99 ITL down 24.8%, 30.1%, 28.2%; mean 27.7%, paired 95% CI 21.0% to 34.3%.
    est = paired_ci([-0.248, -0.301, -0.282])
    assert est is not None and est.low is not None and est.high is not None
    assert round(est.mean, 3) == -0.277
    # (The paper rounds its per-trial figures; from the rounded ones the low end is -34.37%.)
    assert est.low == pytest.approx(-0.343, abs=1e-3) and est.high == pytest.approx(
        -0.210, abs=1e-3
    )
    assert paired_ci([0.1]) is not None and paired_ci([0.1]).low is None  # type: ignore[union-attr]
    assert paired_ci([]) is None


def test_t_quantiles() -> None:
    assert t_quantile_975(1) == pytest.approx(12.706, abs=1e-3)
    assert t_quantile_975(2) == pytest.approx(4.303, abs=1e-3)
    assert t_quantile_975(30) == pytest.approx(2.042, abs=1e-3)
    assert t_quantile_975(40) == pytest.approx(2.021, abs=1e-3)
    assert t_quantile_975(120) == pytest.approx(1.980, abs=1e-3)
    with pytest.raises(ValueError):
        t_quantile_975(0)


def test_compare_arms_on_hand_made_trials(tmp_path: Path) -> None:
    base_gaps = {801: 0.2, 802: 0.4, 803: 0.5}
    cand_gaps = {801: 0.1, 802: 0.3, 803: 0.5}  # -50%, -25%, 0%
    for seed in base_gaps:
        write_trial(trial_path(tmp_path, "off", seed), _trial("off", seed, [[base_gaps[seed]] * 4]))
        write_trial(
            trial_path(tmp_path, "off-repeat", seed),
            _trial("off-repeat", seed, [[base_gaps[seed]] * 4]),
        )
        cand = _trial("dlfp-ct", seed, [[cand_gaps[seed]] * 4])
        if seed == 803:
            cand.requests[0].token_ids = [0, 0, 0, 0, 0]
        write_trial(trial_path(tmp_path, "dlfp-ct", seed), cand)
    result = compare_arms(tmp_path, "off", "dlfp-ct", SLO(1000, 1000), repeat="off-repeat")
    itl = result["metrics"]["itl_p99_ms"]
    assert itl["per_seed"] == pytest.approx({"801": -0.5, "802": -0.25, "803": 0.0})
    assert itl["estimate"]["mean"] == pytest.approx(-0.25)
    half = 4.3027 * 0.25 / 3**0.5
    assert itl["estimate"]["low"] == pytest.approx(-0.25 - half, abs=1e-4)
    assert result["agreement"]["num_pairs"] == 3 and result["agreement"]["num_identical"] == 2
    assert result["repeat"]["agreement"]["rate"] == 1.0
    assert result["agreement"]["workload_matches"]


def test_output_agreement_uses_text_without_token_ids() -> None:
    a, b = _trial("a", 1, [[0.1], [0.1]]), _trial("b", 1, [[0.1], [0.1]])
    for r in (*a.requests, *b.requests):
        r.token_ids = None
    b.requests[1].text = "different"
    agreement = output_agreement(a, b)
    assert (agreement.num_pairs, agreement.num_identical, agreement.num_by_token_ids) == (2, 1, 0)


# --- plots ---


def test_plots_are_png(tmp_path: Path) -> None:
    trial = _trial("dlfp", 801, [[0.1, 0.0, 0.3]])
    paths = [
        itl_cdf({"off": [0.1, 0.2, 0.0], "dlfp": [0.05]}, tmp_path / "itl.png"),
        controller_cap([trial], tmp_path / "cap.png"),
        controller_cap([_trial("off", 1, [[0.1]])], tmp_path / "empty.png"),
    ]
    for path in paths:
        assert path.read_bytes()[:8] == PNG_SIGNATURE


def test_bench_help_via_the_gateway_cli(capsys: pytest.CaptureFixture[str]) -> None:
    from gateway.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--base-url" in out and "--admin-patch" in out and "compare" in out


# --- metrics scraping, the vLLM baseline server and the cross-check (no vLLM import) ---


def test_parse_exposition_sums_label_sets_and_skips_others() -> None:
    from bench.lib.scrape import parse_exposition

    text = (
        "# HELP dlfp_controller_cap_tokens cap\n"
        "dlfp_controller_cap_tokens 256.0\n"
        'vllm:prefix_cache_hits_total{engine="0",model_name="a b"} 32.0\n'
        'vllm:prefix_cache_hits_total{engine="1"} 8.0 1700000000\n'
        "vllm:prefix_cache_hits_created 1.7e9\n"
        "dlfp_controller_observation_seconds NaN\n"
    )
    assert parse_exposition(text) == {
        "dlfp_controller_cap_tokens": 256.0,
        "vllm:prefix_cache_hits_total": 40.0,
    }


def test_vllm_server_command_line() -> None:
    from bench.baseline.vllm_server import VllmServerConfig

    config = VllmServerConfig(model="/m", served_model_name="smol", port=8123, kv_cache_gib=3)
    cmd = config.command()
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    flags = dict(zip(cmd[3::2], cmd[4::2], strict=False))
    assert flags["--model"] == "/m" and flags["--served-model-name"] == "smol"
    assert flags["--max-num-batched-tokens"] == "2048" and flags["--port"] == "8123"
    assert cmd[-1] == "--enforce-eager"
    assert config.environment()["VLLM_CPU_KVCACHE_SPACE"] == "3"


def test_crosscheck_trace_replays_the_schedule(tmp_path: Path) -> None:
    from bench.baseline.crosscheck import (
        relative_diffs,
        same_data_diffs,
        vllm_requests,
        write_trace,
    )

    specs = build_workload(WorkloadConfig(5, 0, 1.0), 801, CharCounter())
    write_trace(specs, 32, 801, tmp_path / "trace.jsonl")
    lines = [json.loads(x) for x in (tmp_path / "trace.jsonl").read_text().splitlines()]
    assert [x["timestamp"] for x in lines] == [s.scheduled_s for s in specs]
    assert [x["input_length"] for x in lines] == [s.num_prompt_tokens for s in specs]
    hash_ids = [h for x in lines for h in x["hash_ids"]]
    assert len(hash_ids) == len(set(hash_ids))  # no shared chunk: no prefix-cache hit

    diffs = relative_diffs(
        {"itl_p99": 110.0, "ttft_p50": None}, {"itl_p99": 100.0, "ttft_p50": 5.0}
    )
    assert diffs["itl_p99"]["rel_diff"] == pytest.approx(0.10)
    assert diffs["ttft_p50"]["rel_diff"] is None
    # vLLM's raw lists (a failed request has ttft 0 and no gaps) against its own figures.
    itls = [[0.01, 0.03], [], [0.02]]
    gaps = [0.01, 0.03, 0.02]
    vllm = {
        "ttfts": [0.5, 0.0, 0.7],
        "itls": itls,
        "latencies": [0.54, 0.0, 0.72],
        "errors": ["", "Never received a valid chunk", ""],
        "p99_itl_ms": float(np.percentile(gaps, 99)) * 1000,
        "p50_ttft_ms": float(np.percentile([0.5, 0.7], 50)) * 1000,
    }
    assert sorted(vllm_requests(vllm)) == [0, 2]
    same = same_data_diffs(vllm)
    assert same["itl_p99"] == pytest.approx(0.0) and same["ttft_p50"] == pytest.approx(0.0)


def test_arm_styles_tell_every_arm_apart() -> None:
    # A sweep has more arms than matplotlib's ten default colours (the capacity sweep has
    # eleven): no two arms may share a colour and a marker.
    arms = [f"arm-{i}" for i in range(45)]
    styles = arm_styles(arms)
    assert len({(s["color"], s["marker"]) for s in styles.values()}) == len(arms)
    assert len({styles[a]["color"] for a in arms[:20]}) == 20
