"""Size the CPU protocol to the machine it runs on, before the first arm.

The protocol's load (0.2 request/s, half of them 1,000-3,000-token prompts)
was set on an AVX-512 machine; a CPU without native bf16, or a slower one,
cannot keep up, and a trial then takes hours with every request queued. So
``bench --calibrate FRACTION`` first measures one long prompt's prefill alone
(time to first token of a 1,500-token prompt, nothing else running, median of
three), then scales the long prompts' lengths so that the offered prefill
load is ``FRACTION`` of the measured prefill throughput. Long prompts shrink
to no less than ``MIN_SCALE`` of their length; where that is not enough, the
arrival rate falls too. The short prompts stay as they are.

The calibration is written to ``calibration.json`` in the results folder and
reused by every later run into that folder, so paired arms and reruns send
the same prompts. ``host.json`` records the CPU model and flags and the
dtype the server runs with, beside every results folder.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from bench.lib.client import ClientSettings, send_request, server_root
from bench.lib.endpoint import bearer
from bench.lib.stats import ttft_s
from bench.lib.tokens import TokenCounter
from bench.lib.workload import RequestSpec, WorkloadConfig, make_prompt
from engine_worker.client.cpu_features import (
    cpu_family_model,
    cpu_model_name,
    read_cpu_flags,
    reported_features,
)

PROBE_TOKENS = 1500
PROBE_SEED = 7
NUM_PROBES = 3
MAX_SCALE = 1.0
"""Calibration only shrinks the protocol: a fast machine runs it as written."""
MIN_SCALE = 0.15
"""Long prompts stay long (150 to 450 tokens at least); past this, the rate falls."""


@dataclass(frozen=True)
class Calibration:
    load_fraction: float
    probe_tokens: int
    probe_ttft_s: list[float]
    prefill_tokens_per_s: float
    offered_tokens_per_s: float
    """Prefill load of the protocol as written."""
    scale: float
    long_min_tokens: int
    long_max_tokens: int
    rate_rps: float


def offered_prefill_tokens_per_s(workload: WorkloadConfig) -> float:
    mean_long = (workload.long_min_tokens + workload.long_max_tokens) / 2
    mean_short = (workload.short_min_tokens + workload.short_max_tokens) / 2
    frac = workload.long_fraction
    return workload.rate_rps * (frac * mean_long + (1 - frac) * mean_short)


def scaled(workload: WorkloadConfig, load_fraction: float, tokens_per_s: float) -> Calibration:
    """The long-prompt lengths that make the prefill load ``load_fraction`` of capacity."""
    offered = offered_prefill_tokens_per_s(workload)
    mean_short = (workload.short_min_tokens + workload.short_max_tokens) / 2
    frac = workload.long_fraction
    long_share = load_fraction * tokens_per_s - workload.rate_rps * (1 - frac) * mean_short
    mean_long = (workload.long_min_tokens + workload.long_max_tokens) / 2
    scale = 1.0 if frac == 0 else long_share / (workload.rate_rps * frac * mean_long)
    scale = min(max(scale, MIN_SCALE), MAX_SCALE)
    low = max(round(workload.long_min_tokens * scale), workload.short_max_tokens + 1)
    high = max(round(workload.long_max_tokens * scale), low)
    shrunk = replace(workload, long_min_tokens=low, long_max_tokens=high)
    rate = workload.rate_rps * min(
        load_fraction * tokens_per_s / offered_prefill_tokens_per_s(shrunk), 1.0
    )
    return Calibration(
        load_fraction, PROBE_TOKENS, [], tokens_per_s, offered, scale, low, high, round(rate, 4)
    )


async def measure_prefill(
    http: httpx.AsyncClient, client: ClientSettings, counter: TokenCounter
) -> tuple[list[float], float]:
    """TTFT of lone long prompts (distinct, so no prefix-cache hit); tokens per second."""
    ttfts = []
    for index in range(NUM_PROBES):
        prompt, num_tokens = make_prompt(
            PROBE_SEED, index, "long", PROBE_TOKENS, PROBE_TOKENS + 50, counter
        )
        spec = RequestSpec(index, "long", False, 0.0, prompt, num_tokens)
        record = await send_request(http, replace(client, max_tokens=1), spec, time.perf_counter())
        ttft = ttft_s(record)
        if not record.is_ok or ttft is None:
            raise ValueError(f"calibration probe failed: {record.error}")
        ttfts.append(ttft)
        print(f"[calibrate] probe {index}: {num_tokens} tokens, ttft {ttft:.2f}s", file=sys.stderr)
    return ttfts, PROBE_TOKENS / statistics.median(ttfts)


async def calibrated_workload(
    http: httpx.AsyncClient,
    client: ClientSettings,
    workload: WorkloadConfig,
    load_fraction: float,
    results_dir: Path,
    counter: TokenCounter,
) -> WorkloadConfig:
    """The workload with calibrated long prompts: measured once, then read back."""
    path = results_dir / "calibration.json"
    if path.exists():
        calibration = Calibration(**json.loads(path.read_text(encoding="utf-8")))
        print(f"[calibrate] reusing {path}", file=sys.stderr)
    else:
        ttfts, tokens_per_s = await measure_prefill(http, client, counter)
        calibration = replace(scaled(workload, load_fraction, tokens_per_s), probe_ttft_s=ttfts)
        results_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(calibration), indent=2) + "\n", encoding="utf-8")
    print(
        f"[calibrate] prefill {calibration.prefill_tokens_per_s:.0f} tokens/s; long prompts "
        f"{calibration.long_min_tokens}-{calibration.long_max_tokens} tokens "
        f"(x{calibration.scale:.2f}) at {calibration.rate_rps:g} request/s, "
        f"for {calibration.load_fraction:.0%} of it",
        file=sys.stderr,
    )
    return replace(
        workload,
        long_min_tokens=calibration.long_min_tokens,
        long_max_tokens=calibration.long_max_tokens,
        rate_rps=calibration.rate_rps,
    )


async def write_host(
    http: httpx.AsyncClient, base_url: str, admin_token: str | None, results_dir: Path
) -> dict[str, Any]:
    """``host.json``: the CPU (model, flags), and the dtype the server reports, if it does."""
    flags = read_cpu_flags()
    host: dict[str, Any] = {
        "cpu_model": cpu_model_name(),
        "cpu_family_model": cpu_family_model(),
        "cpu_features": reported_features(flags),
        "cpu_flags": sorted(flags),
        "machine": platform.machine(),
        "python": platform.python_version(),
    }
    try:
        response = await http.get(
            server_root(base_url) + "/admin/dlfp", headers=bearer(admin_token), timeout=30.0
        )
        if response.status_code == 200:
            state = response.json().get("state", {})
            host |= {"dtype": state.get("dtype"), "server_cpu_features": state.get("cpu_features")}
    except httpx.HTTPError:
        pass
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / "host.json").write_text(json.dumps(host, indent=2) + "\n", encoding="utf-8")
    return host
