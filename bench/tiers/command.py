"""``dlfp-gateway bench tiers``: request tiers with objectives of their own, in phases
that change within the run, every arm on one gateway.

First the calibration, on its own seed (``bench/tiers/calibrate.py``): the machine's
decode step and prefill rate fix the tiers' objectives, and a run under each static cap
of ``--caps`` fixes the static arms: the best cap over the whole run (the baseline, what
a user would tune) and each phase's best (the ceiling). Then the measured run: those
caps, ``dlfp-ct``, ``dlfp`` and ``off``, every seed of ``--seeds`` in an order rotated
per seed, each arm switched in at runtime and the controller reset. Every request is
judged by its own tier's objectives (``bench/tiers/stats.py``); unfinished requests
at the end of the tail count as misses. Every run is a file, written as it ends; a
rerun skips what is recorded; without ``--base-url`` the folder is only re-analysed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from bench.episodes.loop import episode_order
from bench.episodes.setup import arm_patch
from bench.lib.calibrate import write_host
from bench.lib.client import ClientSettings
from bench.lib.command_errors import run_guarded
from bench.lib.endpoint import EndpointError, apply_admin_patch, get_settings, wait_ready
from bench.lib.loadgen import Arm
from bench.lib.tokens import TokenCounter, load_counter
from bench.tiers.calibrate import measure_plan, plan_from_json, sweep_caps
from bench.tiers.report import format_tiers_markdown
from bench.tiers.run import new_run, read_runs, run_arm, run_path, write_run
from bench.tiers.stats import goodput, summarize_tiers
from bench.tiers.workload import TierPlan, requests

DEFAULT_RESULTS = Path("bench/results/tiers")
CONTROLLERS = ("dlfp-ct", "dlfp", "off")


def _arms(picks: dict[str, Any]) -> list[str]:
    static = [picks["whole_run"], *picks["by_phase"].values()]
    unique = sorted(set(static), key=lambda a: int(a.removeprefix("fixed-")))
    return [*unique, *CONTROLLERS]


def _check_plan(path: Path, plan: dict[str, Any]) -> None:
    plan = json.loads(json.dumps(plan))
    if path.exists():
        saved = json.loads(path.read_text(encoding="utf-8"))
        differing = sorted(k for k in plan if saved.get(k) != plan[k])
        if differing:
            raise ValueError(
                f"{path} records another plan ({', '.join(differing)} differ): "
                "use another --results folder"
            )
    else:
        path.write_text(json.dumps(plan, indent=2) + "\n", encoding="utf-8")


async def _measure(args: argparse.Namespace, counter: TokenCounter) -> None:
    results: Path = args.results
    results.mkdir(parents=True, exist_ok=True)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, timeout=args.request_timeout_s) as http:
        models = await wait_ready(http, args.base_url, args.api_key, args.ready_timeout_s)
        model = args.model or (models[0] if models else None)
        if model is None:
            raise ValueError(f"{args.base_url}/v1/models lists no model; pass --model")
        await write_host(http, args.base_url, args.admin_token, results)
        baseline = await get_settings(http, args.base_url, args.admin_token)
        if baseline is None:
            raise EndpointError("GET /admin/dlfp gave no settings: is this the gateway?")
        client = ClientSettings(
            args.base_url, model, 16, api_key=args.api_key, request_timeout_s=args.request_timeout_s
        )
        plan = await measure_plan(http, client, counter, args.phase_s, args.tail_s, results)
        # The paper's dlfp plans to the gateway's objective: the tightest tier's.
        run_patch = {"itl_slo_ms": min(t.itl_slo_ms for t in plan.tiers)}
        caps = [int(c) for c in args.caps.split(",")]
        try:
            picks = await sweep_caps(
                http,
                client,
                counter,
                plan,
                caps,
                args.calibration_seed,
                run_patch,
                args.admin_token,
                results,
            )
            arms = tuple(Arm(n, run_patch | arm_patch(n, None)) for n in _arms(picks))
            seeds = [int(s) for s in args.seeds.split(",")]
            _check_plan(
                results / "tiers.json",
                {
                    "plan": asdict(plan),
                    "seeds": seeds,
                    "calibration_seed": args.calibration_seed,
                    "arms": {a.name: a.admin_patch for a in arms},
                    "counter": counter.name,
                },
            )
            await _run_seeds(http, client, counter, plan, arms, seeds, args.admin_token, results)
        finally:
            try:
                await apply_admin_patch(http, args.base_url, baseline, args.admin_token)
            except EndpointError as exc:
                print(f"[tiers] could not restore the settings: {exc}", file=sys.stderr)


async def _run_seeds(
    http: httpx.AsyncClient,
    client: ClientSettings,
    counter: TokenCounter,
    plan: TierPlan,
    arms: tuple[Arm, ...],
    seeds: list[int],
    admin_token: str | None,
    results: Path,
) -> None:
    total, done, t0 = len(seeds) * len(arms), 0, time.perf_counter()
    for turn, seed in enumerate(seeds):
        sent = requests(plan, seed, counter)
        for position, arm in enumerate(episode_order(arms, turn)):
            done += 1
            path = run_path(results, seed, arm.name)
            if path.exists():
                continue
            patch = arm.admin_patch or {}
            run = new_run(seed, arm.name, position, patch)
            run = await run_arm(http, client, plan, sent, patch, run, admin_token)
            write_run(path, run)
            g = goodput(run, plan)
            phases = ", ".join(f"{p} {100 * (v or 0):.0f}%" for p, v in g["by_phase"].items())
            print(
                f"[tiers] {done}/{total} elapsed {time.perf_counter() - t0:.0f}s | seed {seed} "
                f"#{position + 1} {arm.name}: goodput {100 * (g['goodput'] or 0):.0f}% "
                f"({phases}), refused {g['num_refused']}, cut {g['num_cut']}",
                file=sys.stderr,
                flush=True,
            )


def analyse(results: Path, check: bool, plots: bool) -> int:
    """Recompute ``summary.json`` (and the plot) from the folder's records."""
    from bench.lib.report import checked, save_summary

    path = results / "calibration.json"
    if not path.exists() or not (results / "records").exists():
        print(f"bench tiers: nothing recorded under {results}", file=sys.stderr)
        return 2
    calibration = json.loads(path.read_text(encoding="utf-8"))
    plan = plan_from_json(calibration["plan"])
    if "picks" not in calibration:
        print(f"bench tiers: {path} has no picks: the calibration did not end", file=sys.stderr)
        return 2
    summary = {
        "results_dir": str(results),
        "machine": calibration["machine"],
        **summarize_tiers(read_runs(results), plan, calibration["picks"]),
    }
    print(f"## {results}\n\n{format_tiers_markdown(summary)}\n")
    if check:
        return checked(results, summary)
    print(f"summary: {save_summary(results, summary)}")
    if plots:
        from bench.tiers.plots import goodput_by_phase

        print(f"plot: {goodput_by_phase(summary, results)}")
    return 0


def handler(args: argparse.Namespace) -> int:
    def measure() -> None:
        if args.base_url:
            asyncio.run(_measure(args, load_counter(args.tokenizer)))

    if (status := run_guarded("bench tiers", "recorded runs", measure)) is not None:
        return status
    return analyse(args.results, args.check, not args.no_plots)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from bench.lib.options import add_admin_option, add_server_options

    p = sub.add_parser(
        "tiers",
        help="request tiers with their own objectives, in changing phases; arms paired",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_server_options(p)
    add_admin_option(p)
    p.add_argument(
        "--results", type=Path, default=DEFAULT_RESULTS, help=f"(default {DEFAULT_RESULTS})"
    )
    p.add_argument("--seeds", default="1,2", help="measured seeds (1,2)")
    p.add_argument("--calibration-seed", type=int, default=0, help="(0)")
    p.add_argument(
        "--caps",
        default="16,32,64,128,256",
        help="static caps the calibration sweeps (16,32,64,128,256)",
    )
    p.add_argument("--phase-s", type=float, default=25.0, help="each phase's length, s (25)")
    p.add_argument(
        "--tail-s",
        type=float,
        default=20.0,
        help="after the last phase, until unfinished requests are cut, s (20)",
    )
    p.add_argument("--tokenizer", help="local tokenizer directory for prompt lengths")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument(
        "--check",
        action="store_true",
        help="recompute from the records and compare with summary.json, writing nothing",
    )
    p.set_defaults(handler=handler)
