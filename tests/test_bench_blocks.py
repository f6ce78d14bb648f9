"""``bench sweep --block N`` against the FAKE OpenAI server (quick tier, no engine).

Blocks of 30 requests at 200 request/s and 2 generated tokens: a trial is a fraction of a
second. The fake records what arrived in order (``events``), so a test can see the drain.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from bench.lib.endpoint import DRAIN_GAUGES, EndpointError, wait_drained
from bench.lib.records import read_trial, trial_path
from gateway.cli import main as gateway_main
from tests.fake_openai_server import ADMIN_TOKEN, FakeOpenAIServer

OFF = 'off={"controller":"off"}'
DLFP = 'dlfp-ct={"controller":"dlfp-ct"}'


def block_args(base_url: str, results: Path, rates: str = "200", *more: str) -> list[str]:
    """``bench sweep --block 30`` with two blocks per arm and rate, tiny prompts, no polling."""
    return [
        "bench",
        "sweep",
        "--base-url",
        base_url,
        "--rates",
        rates,
        "--block",
        "30",
        "--num-requests",
        "60",
        "--max-tokens",
        "2",
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
        *more,
    ]


def test_blocks_alternate_the_arms_in_an_order_rotated_per_block(
    fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    args = block_args(fake_server.base_url, tmp_path, "200,300", "--arm", OFF, "--arm", DLFP)
    assert gateway_main(args) == 0
    # Per rate two blocks (seeds 9001, 9002); the order rotates by one per block, and by
    # one more per rate.
    assert [p["controller"] for p in fake_server.patches] == [
        *("off", "dlfp-ct", "dlfp-ct", "off"),
        *("dlfp-ct", "off", "off", "dlfp-ct"),
    ]
    for rate in ("rate-200", "rate-300"):
        for arm in ("off", "dlfp-ct"):
            names = sorted(p.name for p in (tmp_path / rate / arm).glob("seed-*"))
            assert names == ["seed-9001.jsonl.gz", "seed-9002.jsonl.gz"]
    saved = json.loads((tmp_path / "blocks.json").read_text())
    assert saved == {"size": 30, "num_warmup": 6, "seeds": [9001, 9002]}
    # Paired: every arm of a block gets the block's schedule and prompts; blocks differ.
    sent = {
        (arm, seed): [
            (r.prompt_sha256, r.scheduled_s)
            for r in read_trial(trial_path(tmp_path / "rate-200", arm, seed)).requests
        ]
        for arm in ("off", "dlfp-ct")
        for seed in (9001, 9002)
    }
    assert sent["off", 9001] == sent["dlfp-ct", 9001] != sent["off", 9002]
    assert sent["off", 9002] == sent["dlfp-ct", 9002]


def test_blocks_drain_the_server_before_every_trial(
    fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_server.num_busy_scrapes = 2  # busy before the first trial
    fake_server.num_busy_scrapes_after_stream = 1  # and for a while after every stream
    assert gateway_main(block_args(fake_server.base_url, tmp_path)) == 0
    # No request of a block is sent before the server reports itself empty.
    assert fake_server.events == [
        *("busy", "busy", "idle"),
        *["request"] * 30,
        *("busy", "idle"),
        *["request"] * 30,
    ]


def test_blocks_drain_before_the_arms_patch(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    fake_server.num_busy_scrapes_after_stream = 1
    assert gateway_main(block_args(fake_server.base_url, tmp_path, "200", "--arm", OFF)) == 0
    first, second = (i for i, event in enumerate(fake_server.events) if event == "patch")
    assert fake_server.events[first - 1 : first + 2] == ["idle", "patch", "request"]
    assert fake_server.events[second - 3 : second + 1] == ["request", "busy", "idle", "patch"]


def test_blocks_discard_the_first_fifth_of_each_block_as_warm_up(
    fake_server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gateway_main(block_args(fake_server.base_url, tmp_path, "200", "--arm", OFF)) == 0
    line = "blocks of 30 requests per arm, arms alternating; the first 6 of each block discarded"
    out = capsys.readouterr().out
    assert line in out and "  by block: 9001: >= 200, 9002: >= 200" in out
    for seed in (9001, 9002):
        records = read_trial(trial_path(tmp_path / "rate-200", "off", seed)).requests
        assert [r.is_warmup for r in records] == [True] * 6 + [False] * 24
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["blocks"] == {"block_size": 30, "num_warmup_per_block": 6}
    entry = summary["arms"]["off"]["rates"]["200"]
    assert (entry["num_requests"], entry["num_blocks"], entry["seeds"]) == (48, 2, [9001, 9002])
    # A re-analysis (no --base-url) knows the blocks from blocks.json.
    reanalysis = ["bench", "sweep", "--results", str(tmp_path), "--markdown", "--check"]
    assert gateway_main(reanalysis) == 0
    table = capsys.readouterr().out
    assert table.startswith(line) and "lone decode step ms, by block |" in table
    assert "- `off` capacity by block: 9001: >= 200, 9002: >= 200" in table
    # The row's goodput is left out: the fake server's replies are timed on a loaded
    # machine, and one slow reply takes it under 100% while the capacity holds.
    assert "| off | >= 200 | 200 | 48 | " in table


@pytest.mark.parametrize("gauge", DRAIN_GAUGES)
def test_wait_drained_waits_for_every_gauge(fake_server: FakeOpenAIServer, gauge: str) -> None:
    fake_server.busy_gauge, fake_server.num_busy_scrapes = gauge, 3

    async def wait() -> float:
        async with httpx.AsyncClient() as http:
            return await wait_drained(http, fake_server.base_url, timeout_s=10, interval_s=0.01)

    asyncio.run(wait())
    assert fake_server.events == ["busy", "busy", "busy", "idle"]


def test_wait_drained_gives_up_after_its_time_out(fake_server: FakeOpenAIServer) -> None:
    fake_server.busy_gauge, fake_server.num_busy_scrapes = "dlfp_queued_requests", 10**6

    async def wait() -> float:
        async with httpx.AsyncClient() as http:
            return await wait_drained(http, fake_server.base_url, timeout_s=0.2, interval_s=0.01)

    with pytest.raises(EndpointError, match=r"not drained after 0.2 s \(dlfp_queued_requests 1\)"):
        asyncio.run(wait())


@pytest.mark.parametrize(
    "response", [httpx.Response(404), httpx.Response(200, text="other_gauge 3.0\n")]
)
def test_an_endpoint_without_the_gauges_counts_as_drained(response: httpx.Response) -> None:
    async def wait() -> float:
        transport = httpx.MockTransport(lambda request: response)
        async with httpx.AsyncClient(transport=transport) as http:
            return await wait_drained(http, "http://fake-endpoint", timeout_s=0.0)

    assert asyncio.run(wait()) < 1.0


def test_block_options_are_checked_before_any_trial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Nothing listens on port 9: each refusal comes before the harness contacts the server.
    args = block_args("http://127.0.0.1:9", tmp_path)
    assert gateway_main([*args, "--block", "10"]) == 2
    assert "--block: at least 30 requests per arm, got 10" in capsys.readouterr().err
    assert gateway_main([*args, "--warmup", "2"]) == 2
    assert "--warmup does not go with --block" in capsys.readouterr().err
    assert gateway_main([*args, "--seeds", "1,2,3"]) == 2
    assert "--seeds gives 3 blocks, but --num-requests 60" in capsys.readouterr().err
    (tmp_path / "rate-200" / "off").mkdir(parents=True)
    (tmp_path / "rate-200" / "off" / "seed-1.jsonl.gz").write_bytes(b"")
    assert gateway_main(args) == 2
    assert "holds trials not run in blocks" in capsys.readouterr().err


def test_a_resumed_run_keeps_its_block_size(
    fake_server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = block_args(fake_server.base_url, tmp_path, "200", "--num-requests", "30")
    assert gateway_main(args) == 0
    num_sent = len(fake_server.requests)
    capsys.readouterr()
    assert gateway_main([*args, "--block", "40"]) == 2
    assert "was run in blocks of 30 (6 warm-up), not 40" in capsys.readouterr().err
    at = args.index("--block")
    assert gateway_main(args[:at] + args[at + 2 :]) == 2
    assert "resume it with --block 30" in capsys.readouterr().err
    assert len(fake_server.requests) == num_sent
    # The same block size resumes; more requests add blocks to blocks.json.
    assert gateway_main([*args, "--num-requests", "60"]) == 0
    assert len(fake_server.requests) == num_sent + 30
    assert json.loads((tmp_path / "blocks.json").read_text())["seeds"] == [9001, 9002]
