"""``dlfp-gateway bench episodes``: interference episodes, every arm on one gateway, paired.

Every arm runs on the same gateway, switched at runtime (``PATCH /admin/dlfp`` with
the arm's settings over the gateway's start-up settings, then ``POST
/admin/dlfp/reset``), and replays the same episodes: the machine's own drift
then falls on every arm alike, and arms are compared seconds apart, paired by
episode, in an order rotated per episode. The episode is ``bench/episodes/run.py``,
the arms, sizing and conditions ``bench/episodes/setup.py``, the run over episodes
and arms ``bench/episodes/loop.py``, and the figures and verdict
``bench/episodes/stats.py``; this module is the command.

At the start the run sizes the long prompts to about ``--long-prefill-s`` of lone
prefill on this machine (``sizing.json``, reused on resume). Every arm's run of
every episode is one file, ``records/episode-<e>/<arm>.json.gz``, written as it
ends; a rerun skips what is recorded. ``--conditions`` runs the four conditions
of the baseline (``itl_slo_ms`` at the gateway's setting and at min(3 x the lone
decode step, 0.6 x it), each with 2 and 8 decoding streams) and a fifth of thin slack
(1.7 x the decode-only step of 8 streams, with 8), one folder each; a results folder
whose ``conditions.json`` predates the fifth keeps its four.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from bench.episodes.loop import ADMISSION_PATCH, EpisodeRun, run_episodes
from bench.episodes.run import (
    EpisodeShape,
    read_records,
)
from bench.episodes.setup import (
    FULL,
    SHED,
    THIN_DECODERS,
    arm_admission_patch,
    arm_patch,
    check_arm_names,
    conditions,
    default_arm_names,
    lone_decode_probe_ms,
    size_long_prompts,
)
from bench.episodes.stats import SENTINEL, format_episodes_markdown, summarize_episodes
from bench.lib.calibrate import write_host
from bench.lib.client import ClientSettings, server_root
from bench.lib.command_errors import run_guarded
from bench.lib.endpoint import (
    EndpointError,
    bearer,
    get_settings,
    wait_ready,
)
from bench.lib.loadgen import Arm
from bench.lib.tokens import TokenCounter, load_counter

DEFAULT_RESULTS = Path("bench/results/episodes")
DEFAULT_DECODERS = 4
DEFAULT_MAX_MODEL_LEN = 4096


async def _prepare(args: argparse.Namespace, counter: TokenCounter) -> dict[str, Any]:
    """Readiness, host, baseline settings, long-prompt size and (with --conditions) the
    conditions, each measured once and saved in the results folder."""
    results: Path = args.results
    async with httpx.AsyncClient(timeout=args.request_timeout_s) as http:
        models = await wait_ready(http, args.base_url, args.api_key, args.ready_timeout_s)
        model = args.model or (models[0] if models else None)
        if model is None:
            raise ValueError(f"{args.base_url}/v1/models lists no model; pass --model")
        max_len = await _max_model_len(http, args.base_url, args.api_key, model)
        await write_host(http, args.base_url, args.admin_token, results)
        baseline_path = results / "baseline-settings.json"
        if baseline_path.exists():
            baseline = json.loads(baseline_path.read_text(encoding="utf-8"))
        else:
            baseline = await get_settings(http, args.base_url, args.admin_token)
            if baseline is None:
                raise EndpointError("GET /admin/dlfp gave no settings: is this the gateway?")
            baseline_path.write_text(json.dumps(baseline, indent=2) + "\n", encoding="utf-8")
        client = ClientSettings(
            base_url=args.base_url,
            model=model,
            max_tokens=args.max_tokens,
            api_key=args.api_key,
            request_timeout_s=args.request_timeout_s,
        )
        long_tokens = await size_long_prompts(
            http, client, counter, args.long_prefill_s, max_len, results
        )
        prepared: dict[str, Any] = {
            "client": client,
            "baseline": baseline,
            "long_tokens": long_tokens,
            "decoder_max_tokens": max(64, max_len - 128),
        }
        if args.conditions:
            path = results / "conditions.json"
            if path.exists():
                prepared["conditions"] = json.loads(path.read_text(encoding="utf-8"))
            else:
                step = await lone_decode_probe_ms(http, client)
                thin_step = await lone_decode_probe_ms(http, client, THIN_DECODERS)
                found = conditions(float(baseline["itl_slo_ms"]), step, thin_step)
                prepared["conditions"] = {
                    "lone_decode_step_ms": step,
                    "decode_step_ms_8": thin_step,
                    "conditions": found,
                }
                path.write_text(json.dumps(prepared["conditions"], indent=2) + "\n", "utf-8")
    return prepared


async def _max_model_len(
    http: httpx.AsyncClient, base_url: str, api_key: str | None, model: str
) -> int:
    """The served model's ``max_model_len`` from ``/v1/models`` (vLLM and this gateway
    list it), else ``DEFAULT_MAX_MODEL_LEN`` with a warning."""
    url = server_root(base_url) + "/v1/models"
    response = await http.get(url, headers=bearer(api_key), timeout=30.0)
    entries = response.json().get("data", []) if response.status_code == 200 else []
    for entry in entries:
        if entry.get("id") == model and entry.get("max_model_len"):
            return int(entry["max_model_len"])
    print(
        f"[episodes] {url} gives no max_model_len for {model}: assuming {DEFAULT_MAX_MODEL_LEN}",
        file=sys.stderr,
    )
    return DEFAULT_MAX_MODEL_LEN


def _runs(args: argparse.Namespace, prepared: dict[str, Any]) -> list[EpisodeRun]:
    baseline = prepared["baseline"]
    shape = EpisodeShape(
        num_decoders=args.decoders or DEFAULT_DECODERS,
        arrival_kinds=tuple(args.kinds.split(",")),
        offsets_s=tuple(float(x) for x in args.offsets.split(",")),
        offset_jitter_s=args.offset_jitter_s,
        long_tokens=prepared["long_tokens"],
        arrival_max_tokens=args.max_tokens,
        decoder_max_tokens=prepared["decoder_max_tokens"],
        lead_s=args.lead_s,
        tail_s=args.tail_s,
    )
    names = args.arms.split(",") if args.arms else default_arm_names(baseline)
    check_arm_names(names, baseline)
    if args.conditions:
        found = prepared["conditions"]["conditions"]
        only = args.only.split(",") if args.only else list(found)
        unknown = sorted(set(only) - set(found))
        if unknown:
            raise ValueError(
                f"--only: no condition {', '.join(unknown)} (known: {', '.join(found)})"
            )
        items = [
            (args.results / name, c["itl_slo_ms"], c["num_decoders"])
            for name, c in found.items()
            if name in only
        ]
    else:
        items = [(args.results, args.itl_slo_ms, args.decoders or DEFAULT_DECODERS)]
    runs = []
    for folder, slo, decoders in items:
        patch_slo = slo if (args.conditions or args.itl_slo_ms is not None) else None
        arms = tuple(Arm(n, arm_patch(n, patch_slo), arm_admission_patch(n)) for n in names)
        runs.append(
            EpisodeRun(
                results_dir=folder,
                client=prepared["client"],
                shape=replace(shape, num_decoders=decoders),
                arms=arms,
                num_episodes=args.episodes,
                itl_slo_ms=float(slo if slo is not None else baseline["itl_slo_ms"]),
                admin_token=args.admin_token,
                ready_timeout_s=args.ready_timeout_s,
                admission_patch=ADMISSION_PATCH
                | ({"slo_check": False} if args.no_slo_check else {}),
            )
        )
    return runs


def analyse(folder: Path, check: bool, plots: bool) -> int:
    """Recompute ``summary.json`` (and the plot) of one episodes folder from its records."""
    from bench.lib.report import checked, save_summary

    plan_path = folder / "episodes.json"
    if not plan_path.exists():
        print(f"bench episodes: {plan_path} is missing: nothing recorded here", file=sys.stderr)
        return 2
    plan = json.loads(plan_path.read_text(encoding="utf-8"))
    summary = summarize_episodes(read_records(folder), float(plan["itl_slo_ms"]))
    summary = {"results_dir": str(folder), "plan": plan, **summary}
    print(f"## {folder}\n\n{format_episodes_markdown(summary)}\n")
    if check:
        return checked(folder, summary)
    print(f"summary: {save_summary(folder, summary)}")
    if plots:
        from bench.episodes.plots import episode_frontier, episode_prompt_classes

        print(f"plot: {episode_frontier(summary, folder)}")
        print(f"plot: {episode_prompt_classes(summary, folder)}")
    return 0


def folders(results: Path) -> list[Path]:
    """The episodes folders under ``results``: itself, or one per condition."""
    if (results / "episodes.json").exists():
        return [results]
    return sorted(p.parent for p in results.glob("*/episodes.json"))


def handler(args: argparse.Namespace) -> int:
    def episodes() -> None:
        if args.conditions and (args.decoders is not None or args.itl_slo_ms is not None):
            raise ValueError("--conditions sets the decoding streams and the objective itself")
        if args.only and not args.conditions:
            raise ValueError("--only picks among --conditions")
        if args.base_url:
            counter = load_counter(args.tokenizer)
            prepared = asyncio.run(_prepare(args, counter))
            for run in _runs(args, prepared):
                print(
                    f"[episodes] {run.results_dir}: {len(run.arms)} arms x {run.num_episodes} "
                    f"episodes, {run.shape.num_decoders} decoding streams, ITL objective "
                    f"{run.itl_slo_ms:g} ms",
                    file=sys.stderr,
                )
                asyncio.run(run_episodes(run, prepared["baseline"], counter))

    if (status := run_guarded("bench episodes", "recorded runs", episodes)) is not None:
        return status
    found = folders(args.results)
    if not found:
        print(f"bench episodes: nothing recorded under {args.results}", file=sys.stderr)
        return 2
    return max(analyse(folder, args.check, not args.no_plots) for folder in found)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from bench.lib.options import add_admin_option, add_server_options

    p = sub.add_parser(
        "episodes",
        help="interference episodes: every arm on one gateway, paired by episode",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_server_options(p)
    add_admin_option(p)
    p.add_argument(
        "--results", type=Path, default=DEFAULT_RESULTS, help=f"(default {DEFAULT_RESULTS})"
    )
    p.add_argument("--episodes", type=int, default=6, help="episodes per arm (6)")
    p.add_argument(
        "--decoders", type=int, help=f"decoding streams per episode ({DEFAULT_DECODERS})"
    )
    p.add_argument("--kinds", default="long,short,long,short", help="the arrivals, in order")
    p.add_argument("--offsets", default="0,0.5,1.5,2", help="their send offsets, s")
    p.add_argument(
        "--offset-jitter-s",
        type=float,
        default=0.5,
        help="each offset moves later by a uniform draw below this, from the episode's seed "
        "(every arm alike); at most the smallest gap between offsets, 0 where two are equal "
        "(default 0.5)",
    )
    p.add_argument("--max-tokens", type=int, default=8, help="tokens per arrival (8)")
    p.add_argument(
        "--lead-s", type=float, default=1.0, help="decoding alone before the arrivals, s (1)"
    )
    p.add_argument("--tail-s", type=float, default=0.5, help="decoding after the window, s (0.5)")
    p.add_argument(
        "--long-prefill-s",
        type=float,
        default=3.0,
        help="size long prompts to about this much lone prefill, measured at the start (3)",
    )
    p.add_argument(
        "--arms",
        help=f"comma-separated: off, fixed-<tokens>, dlfp, dlfp-ct, dlfp-ct-max-<tokens> "
        f"(dlfp-ct, each step's prefill at most <tokens>), dlfp-ct-loss-<percent> (dlfp-ct, "
        f"step_rate_loss <percent>/100), {FULL} (dlfp-ct, every step "
        f"filled to its slack), {SHED} (dlfp-ct with admission's no_slack shedding on), "
        f"dlfp-ct-target, {SENTINEL} "
        "(default: off, fixed at 8, 16, ... up to max_cap_tokens, dlfp, dlfp-ct and the "
        "sentinel)",
    )
    p.add_argument(
        "--itl-slo-ms",
        type=float,
        help="judge by this objective instead of the gateway's, and set it as every arm's "
        "itl_slo_ms",
    )
    p.add_argument(
        "--conditions",
        action="store_true",
        help="five conditions (one folder each): itl_slo_ms at the gateway's setting and at "
        "min(3 x lone decode step, 0.6 x it), with 2 and 8 decoding streams, and thin slack: "
        "1.7 x the decode-only step of 8 streams, with 8",
    )
    p.add_argument(
        "--only", help="with --conditions: run only these (comma-separated condition names)"
    )
    p.add_argument(
        "--no-slo-check",
        action="store_true",
        help="turn admission's TTFT check off for the whole run, restored at the end, so "
        "that every arm serves the same arrivals (its prediction is learnt from every arm's "
        "first tokens alike, so it may refuse under one arm what another would serve)",
    )
    p.add_argument("--tokenizer", help="local tokenizer directory for prompt lengths")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument(
        "--check",
        action="store_true",
        help="recompute from the records and compare with summary.json, writing nothing",
    )
    p.set_defaults(handler=handler)
