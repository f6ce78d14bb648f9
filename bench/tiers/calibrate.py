"""The calibration of ``bench tiers``, on its own seed, before the measured run.

It measures the decode step with 2 and 8 streams and the lone prefill rate, builds the
tiers' objectives and phases from them (``plan_from``), then runs the whole workload
of the calibration seed once under each static cap of ``--caps``; the best cap over the
whole run and each phase's best become the measured run's static arms. Everything is
saved in ``calibration.json`` and ``calibration/<arm>.json.gz``, and reused on resume:
the arms are fixed before the first measured request.
"""

from __future__ import annotations

import json
import statistics
import sys
import uuid
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import httpx

from bench.episodes.setup import arm_patch, lone_decode_probe_ms, prefill_probe
from bench.lib.client import ClientSettings
from bench.lib.tokens import TokenCounter
from bench.tiers.run import TierRun, new_run, read_run, run_arm, write_run
from bench.tiers.stats import goodput, pick_static_arms
from bench.tiers.workload import Phase, Tier, TierPlan, plan_from, requests

PREFILL_PROBE_TOKENS = 1000
NUM_PREFILL_PROBES = 3


async def prefill_rate(
    http: httpx.AsyncClient, client: ClientSettings, counter: TokenCounter
) -> float:
    """Median server prompt tokens per second of first token, over lone prompts of about
    ``PREFILL_PROBE_TOKENS`` (after one warm-up)."""
    salted = replace(client, cache_salt=f"dlfp-tiers-{uuid.uuid4().hex[:12]}")
    rates = []
    for index in range(NUM_PREFILL_PROBES + 1):
        probe = await prefill_probe(
            http, salted, counter, index, PREFILL_PROBE_TOKENS, 4800, "[tiers] prefill probe"
        )
        if index:
            rates.append(float(probe["server_tokens"]) / float(probe["ttft_s"]))
    return statistics.median(rates)


def plan_from_json(obj: dict[str, Any]) -> TierPlan:
    return TierPlan(
        tiers=tuple(Tier(**t) for t in obj["tiers"]),
        phases=tuple(Phase(**p) for p in obj["phases"]),
        tail_s=float(obj["tail_s"]),
    )


async def measure_plan(
    http: httpx.AsyncClient,
    client: ClientSettings,
    counter: TokenCounter,
    phase_s: float,
    tail_s: float,
    results: Path,
) -> TierPlan:
    """The machine's figures and the plan built from them (``calibration.json``'s
    ``machine`` and ``plan``), measured once."""
    path = results / "calibration.json"
    if path.exists():
        return plan_from_json(json.loads(path.read_text(encoding="utf-8"))["plan"])
    step_2 = await lone_decode_probe_ms(http, client, 2)
    step_8 = await lone_decode_probe_ms(http, client, 8)
    rate = await prefill_rate(http, client, counter)
    plan = plan_from(step_8, rate, phase_s, tail_s)
    machine = {"decode_step_ms_2": step_2, "decode_step_ms_8": step_8, "prefill_tokens_per_s": rate}
    print(
        f"[tiers] decode step {step_2:.0f} ms (2 streams), {step_8:.0f} ms (8); lone prefill "
        f"{rate:.0f} tokens/s",
        file=sys.stderr,
    )
    results.mkdir(parents=True, exist_ok=True)
    saved = {"machine": machine, "plan": asdict(plan)}
    path.write_text(json.dumps(saved, indent=2) + "\n", encoding="utf-8")
    return plan


async def sweep_caps(
    http: httpx.AsyncClient,
    client: ClientSettings,
    counter: TokenCounter,
    plan: TierPlan,
    caps: list[int],
    seed: int,
    run_patch: dict[str, Any],
    admin_token: str | None,
    results: Path,
) -> dict[str, Any]:
    """Every cap's run of the calibration seed (each recorded as it ends), then the picks,
    saved in ``calibration.json``."""
    path = results / "calibration.json"
    saved = json.loads(path.read_text(encoding="utf-8"))
    if "picks" in saved:
        return dict(saved["picks"])
    sent = requests(plan, seed, counter)
    runs: dict[str, TierRun] = {}
    for position, cap in enumerate(caps):
        arm = f"fixed-{cap}"
        file = results / "calibration" / f"{arm}.json.gz"
        if file.exists():
            runs[arm] = read_run(file)
            continue
        patch = run_patch | arm_patch(arm, None)
        run = new_run(seed, arm, position, patch)
        runs[arm] = await run_arm(http, client, plan, sent, patch, run, admin_token)
        write_run(file, runs[arm])
        g = goodput(runs[arm], plan)
        phases = ", ".join(f"{p} {100 * (v or 0):.0f}%" for p, v in g["by_phase"].items())
        print(
            f"[tiers] calibration {position + 1}/{len(caps)} {arm}: goodput "
            f"{100 * (g['goodput'] or 0):.0f}% ({phases}), refused {g['num_refused']}",
            file=sys.stderr,
            flush=True,
        )
    picks = pick_static_arms(runs, plan)
    saved |= {"seed": seed, "caps": caps, "picks": picks}
    path.write_text(json.dumps(saved, indent=2) + "\n", encoding="utf-8")
    return picks
