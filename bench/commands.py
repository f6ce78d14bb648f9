"""``dlfp-gateway bench``: measure an OpenAI-compatible endpoint on the paper's protocol.

``bench`` runs trials; ``bench compare``, ``bench summary`` and ``bench plot``
re-analyse the raw records; ``bench crosscheck`` runs vLLM's own benchmark client
beside this one; ``bench vllm-server`` serves the baseline vLLM OpenAI server;
``bench abuse`` runs bounded abuse scenarios against a gateway on loopback;
``bench episodes`` replays interference episodes, every arm on one gateway, paired;
``bench tiers`` sends request tiers with their own objectives in phases that change;
``bench overhead`` times the DLFP scheduler's own cost per step against vLLM's, in-process.
``--study FILE`` takes arms, rates and seeds from a study (``bench/studies/*.toml``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bench.capacity.study import apply_study
from bench.lib.command_errors import run_guarded
from bench.lib.options import (
    add_results_option,
    add_run_options,
    add_slo_options,
    arms_from,
    client_from,
    resolve_model,
    slo_from,
    workload_from,
)
from bench.lib.protocols import PAPER_SEEDS
from bench.lib.report import checked
from bench.lib.stats import SLO

if TYPE_CHECKING:
    from bench.lib.loadgen import RunConfig


def report(results: Path, slo: SLO, plots: bool, check: bool = False) -> int:
    from bench.lib.report import cache_warnings, format_summary, save_summary, summarize_results

    summary = summarize_results(results, slo)
    if check:
        print(format_summary(summary))
        return checked(results, summary)
    save_summary(results, summary)
    print(format_summary(summary))
    for warning in cache_warnings(summary):
        print(f"WARNING: {warning}", file=sys.stderr)
    print(f"summary: {results / 'summary.json'}")
    if plots:
        from bench.lib.plots import plot_results

        for path in plot_results(results):
            print(f"plot: {path}")
    return 0


def run_config_from(args: argparse.Namespace) -> RunConfig:
    """The trials the ``bench`` options ask for (resolves the model name from the server)."""
    from bench.lib.loadgen import RunConfig

    return RunConfig(
        results_dir=args.results,
        arms=arms_from(args),
        seeds=args.seeds or PAPER_SEEDS,
        workload=workload_from(args),
        client=client_from(args, asyncio.run(resolve_model(args))),
        admin_token=args.admin_token,
        metrics_interval_s=args.metrics_interval_s,
        ready_timeout_s=args.ready_timeout_s,
        use_cache_salt=not args.no_cache_salt,
        force=args.force,
        rotation=args.rotate or 0,
        calibrate_fraction=args.calibrate,
    )


def run_handler(args: argparse.Namespace) -> int:
    from bench.lib.loadgen import run_all
    from bench.lib.tokens import load_counter

    if not args.base_url:
        raise SystemExit("bench: --base-url is required to run trials")

    def trials() -> None:
        apply_study(args, sweep=False)
        asyncio.run(run_all(run_config_from(args), load_counter(args.tokenizer)))

    if (status := run_guarded("bench", "finished trials", trials)) is not None:
        return status
    return report(args.results, slo_from(args), plots=not args.no_plots)


def sweep_handler(args: argparse.Namespace) -> int:
    from bench.capacity.blocks import block_run, check_resumable, plan_blocks, save_blocks
    from bench.capacity.plots import sweep_plots
    from bench.capacity.sweep import (
        GOODPUT_TARGET,
        format_sweep,
        format_sweep_markdown,
        parse_rates,
        run_sweep,
        sweep_summary,
    )
    from bench.lib.protocols import PROTOCOLS
    from bench.lib.report import save_summary
    from bench.lib.tokens import load_counter

    def trials() -> None:
        apply_study(args, sweep=True)
        blocks = None
        if args.block is not None:
            if args.warmup is not None:
                raise ValueError("--warmup does not go with --block (its first 20% are warm-up)")
            default_num_requests = PROTOCOLS[args.protocol].num_requests
            blocks = plan_blocks(args.block, args.seeds, args.num_requests, default_num_requests)
        if args.base_url:
            if args.rates is None:
                raise ValueError("--rates is required to run trials")
            rates = parse_rates(args.rates)
            if args.stop_below is not None and not 0 < args.stop_below <= GOODPUT_TARGET:
                raise ValueError(f"--stop-below: a goodput in (0, {GOODPUT_TARGET}]")
            check_resumable(args.results, blocks)
            run = run_config_from(args)
            if blocks is not None:
                run = block_run(run, blocks)
                save_blocks(args.results, blocks)
            counter = load_counter(args.tokenizer)
            asyncio.run(run_sweep(run, rates, counter, slo_from(args), args.stop_below))

    if (status := run_guarded("bench sweep", "finished trials", trials)) is not None:
        return status
    summary = sweep_summary(args.results, slo_from(args))
    print(format_sweep_markdown(summary) if args.markdown else format_sweep(summary))
    if args.check:
        return checked(args.results, summary)
    print(f"summary: {save_summary(args.results, summary)}")
    for path in sweep_plots(summary, args.results):
        print(f"plot: {path}")
    return 0


def summary_handler(args: argparse.Namespace) -> int:
    return report(args.results, slo_from(args), plots=args.plots, check=args.check)


def plot_handler(args: argparse.Namespace) -> int:
    from bench.lib.plots import plot_results

    for path in plot_results(args.results):
        print(f"plot: {path}")
    return 0


def compare_handler(args: argparse.Namespace) -> int:
    from bench.lib.compare import compare_arms, format_comparison
    from bench.lib.records import find_trials

    repeat = args.repeat
    if repeat is None and f"{args.baseline}-repeat" in find_trials(args.results):
        repeat = f"{args.baseline}-repeat"
    try:
        result = compare_arms(args.results, args.baseline, args.candidate, slo_from(args), repeat)
    except (FileNotFoundError, ValueError) as exc:
        print(f"bench compare: {exc}", file=sys.stderr)
        return 2
    print(format_comparison(result))
    path = args.results / f"compare-{args.candidate}-vs-{args.baseline}.json"
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"comparison: {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """``dlfp-gateway bench`` and its sub-commands."""
    from bench.abuse import command as abuse
    from bench.baseline import crosscheck, vllm_server
    from bench.episodes import command as episodes
    from bench.harness import admission_cost, device_timer_cost, gpu_check, overhead
    from bench.probes import chunks
    from bench.tenants import command as tenants
    from bench.tiers import command as tiers

    bench = argparse.ArgumentParser(
        prog="dlfp-gateway bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_options(bench)
    bench.set_defaults(handler=run_handler)
    sub = bench.add_subparsers(
        dest="bench_command",
        required=False,
        title="sub-commands (none: run trials)",
        metavar="{compare,summary,plot,sweep,episodes,tiers,chunks,overhead,crosscheck,vllm-server,abuse}",
    )
    sweep = sub.add_parser(
        "sweep",
        help="capacity under SLO: the protocol at several rates per arm",
        description="Run every arm at each rate (results in rate-<r>/), then report goodput, "
        "TTFT and ITL per rate and the capacity (highest rate with goodput >= 90%) per arm. "
        "Without --base-url, only re-analyses what is recorded.",
    )
    add_run_options(sweep)
    sweep.add_argument(
        "--rates",
        help="Poisson rates, req/s: R1,R2,... (to run trials; a re-analysis reads every "
        "rate-<r>/ recorded)",
    )
    sweep.add_argument(
        "--stop-below",
        type=float,
        metavar="GOODPUT",
        help="only bracket each arm's capacity: no rate above one where its goodput fell "
        "below GOODPUT (0 to 0.9), none below one where it met 90%%; default: every arm at "
        "every rate",
    )
    sweep.add_argument(
        "--block",
        type=int,
        metavar="N",
        help="run each rate in blocks of N requests per arm (N >= 30), every arm on each "
        "block's schedule and prompts, arms alternating in an order rotated per block, the "
        "server drained before every trial; the first 20%% of each block are warm-up "
        "(not with --warmup). --num-requests is then the requests per arm and rate, in "
        "ceil(num_requests / N) blocks seeded 9001, 9002, ... (or one per --seeds)",
    )
    sweep.add_argument(
        "--markdown", action="store_true", help="print the figures as a Markdown table"
    )
    add_check_option(sweep)
    sweep.set_defaults(handler=sweep_handler)
    compare = sub.add_parser("compare", help="paired comparison of two arms over their seeds")
    add_results_option(compare)
    compare.add_argument("--baseline", required=True, help="arm to compare against (e.g. off)")
    compare.add_argument("--candidate", required=True, help="arm under test (e.g. dlfp-ct)")
    compare.add_argument(
        "--repeat",
        help="a repeat of the baseline arm, for run-to-run "
        "agreement (default <baseline>-repeat if recorded)",
    )
    add_slo_options(compare)
    compare.set_defaults(handler=compare_handler)
    summary = sub.add_parser("summary", help="recompute the summary table and summary.json")
    add_results_option(summary)
    add_slo_options(summary)
    summary.add_argument("--plots", action="store_true", help="also redraw the plots")
    add_check_option(summary)
    summary.set_defaults(handler=summary_handler)
    plot = sub.add_parser("plot", help="redraw the PNG plots of a results directory")
    add_results_option(plot)
    plot.set_defaults(handler=plot_handler)
    crosscheck.add_parser(sub)
    chunks.add_parser(sub)
    vllm_server.add_parser(sub)
    abuse.add_parser(sub)
    episodes.add_parser(sub)
    overhead.add_parser(sub)
    gpu_check.add_parser(sub)
    device_timer_cost.add_parser(sub)
    tenants.add_parser(sub)
    tiers.add_parser(sub)
    admission_cost.add_parser(sub)
    return bench


def add_check_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--check",
        action="store_true",
        help="recompute from the raw records and compare with summary.json, writing nothing: "
        "status 1 and the differences if they differ",
    )
