"""``bench episodes`` against the shared real gateway (tiny model, float32): one short
episode per arm, switched at runtime. The harness must cut its decoding streams
(the engine keeps none of them), send the long prompts within ``max_model_len``, and
leave the gateway's settings as it found them. No timing is asserted."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from bench.episodes.run import read_records
from bench.episodes.setup import LEN_MARGIN
from gateway.cli import main as gateway_main
from tests.conftest import ADMIN_TOKEN, Server

pytestmark = pytest.mark.engine

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def _unfinished(http: httpx.Client) -> float:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith("dlfp_engine_unfinished_requests "):
            return float(line.split()[1])
    raise AssertionError("no dlfp_engine_unfinished_requests in /metrics")


def test_one_episode_per_arm_on_the_session_gateway(
    gateway_server: Server, tiny_model_dir: Path, tmp_path: Path
) -> None:
    with gateway_server.client() as http:
        before = http.get("/admin/dlfp", headers=ADMIN).json()["settings"]
    start = time.monotonic()
    args = [
        "bench", "episodes", "--base-url", gateway_server.base_url, "--admin-token",
        ADMIN_TOKEN, "--results", str(tmp_path), "--episodes", "1", "--decoders", "2",
        "--arms", "off,fixed-16", "--long-prefill-s", "0.5", "--lead-s", "0.3",
        "--tail-s", "0.1", "--no-plots", "--tokenizer", str(tiny_model_dir),
    ]  # fmt: skip
    assert gateway_main(args) == 0
    print(f"\nbench episodes, 2 arms x 1 episode on the session gateway: "
          f"{time.monotonic() - start:.1f} s")  # fmt: skip
    records = read_records(tmp_path)
    assert set(records) == {"off", "fixed-16"}
    for arm, by_episode in records.items():
        run = by_episode[0]
        assert run.error is None, (arm, run.error)
        assert all(r.status == "ok" and len(r.chunk_s) > 3 for r in run.decoders)
        assert [r.usage["completion_tokens"] for r in run.arrivals if r.usage] == [8] * 4
        long_tokens = [r.num_prompt_tokens or 0 for r in run.arrivals if r.kind == "long"]
        assert len(long_tokens) == 2 and max(long_tokens) <= 4096 - LEN_MARGIN
    with gateway_server.client() as http:
        assert http.get("/admin/dlfp", headers=ADMIN).json()["settings"] == before
        deadline = time.monotonic() + 30
        while _unfinished(http) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _unfinished(http) == 0  # the cut decoding streams were aborted
