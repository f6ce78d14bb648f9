"""The ``bench`` command-line options, and the settings objects built from them.

An option left unset takes its value from ``--study`` (its part's, then the study's), else
from the ``--protocol`` preset or its own default.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import TypeVar

import httpx

from bench.lib.client import ClientSettings
from bench.lib.endpoint import parse_patch, wait_ready
from bench.lib.loadgen import Arm
from bench.lib.protocols import PROTOCOLS
from bench.lib.stats import SLO
from bench.lib.workload import WorkloadConfig

T = TypeVar("T")

DEFAULT_RESULTS = Path("bench/results")
_ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _seeds(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"seeds are integers separated by commas: {text}") from exc


def add_slo_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--protocol",
        choices=sorted(PROTOCOLS),
        default="cpu",
        help="preset for the options left unset (default cpu)",
    )
    parser.add_argument("--ttft-slo-ms", type=float, help="TTFT objective (cpu 30000, gpu 2000)")
    parser.add_argument("--itl-slo-ms", type=float, help="ITL objective (cpu 500, gpu 100)")
    parser.add_argument(
        "--itl-slo-percentile",
        type=float,
        default=100.0,
        help="which of a request's own gaps the ITL SLO judges: 100 = its "
        "largest (default), 99 = its P99 gap",
    )


def add_results_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--results",
        type=Path,
        default=DEFAULT_RESULTS,
        help=f"results directory (default {DEFAULT_RESULTS})",
    )


def add_server_options(p: argparse.ArgumentParser) -> None:
    """Where the endpoint is, how to authenticate, and how long to wait for it."""
    p.add_argument(
        "--base-url", help="server root, e.g. http://127.0.0.1:8000 (a /v1 suffix is ok)"
    )
    p.add_argument("--model", help="model name to send (default: the first of /v1/models)")
    p.add_argument(
        "--api-key",
        default=os.environ.get("OPENAI_API_KEY"),
        help="bearer key for /v1/* [env OPENAI_API_KEY]",
    )
    p.add_argument("--request-timeout-s", type=float, default=900.0)
    p.add_argument("--ready-timeout-s", type=float, default=600.0)


def add_admin_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--admin-token",
        default=os.environ.get("DLFP_ADMIN_TOKEN"),
        help="bearer token for /admin/* [env DLFP_ADMIN_TOKEN]",
    )


def add_endpoint_options(p: argparse.ArgumentParser) -> None:
    add_server_options(p)
    p.add_argument("--max-tokens", type=int, help="generated tokens per request, exact (128)")
    p.add_argument(
        "--no-token-ids",
        action="store_true",
        help="do not ask for return_token_ids (for endpoints that reject it)",
    )
    p.add_argument(
        "--no-cache-salt",
        action="store_true",
        help="do not send a per-trial cache_salt (for endpoints that reject it)",
    )
    p.add_argument("--extra-body", help="JSON object merged into every request body")


def add_workload_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rate", type=float, help="Poisson arrival rate, req/s (cpu 0.2, gpu 1.0)")
    p.add_argument("--num-requests", type=int, help="measured requests per trial (100)")
    p.add_argument("--warmup", type=int, help="warm-up requests before them (cpu 2, gpu 10)")
    p.add_argument("--long-fraction", type=float, help="share of long prompts (0.5)")
    p.add_argument("--long-min-tokens", type=int, help="(1000)")
    p.add_argument("--long-max-tokens", type=int, help="(3000)")
    p.add_argument("--short-min-tokens", type=int, default=20)
    p.add_argument("--short-max-tokens", type=int, default=120)
    p.add_argument(
        "--tokenizer",
        help="local tokenizer directory for prompt lengths (default: ~4 characters per token)",
    )


def add_run_options(p: argparse.ArgumentParser) -> None:
    add_endpoint_options(p)
    add_workload_options(p)
    p.add_argument(
        "--endpoint",
        choices=("chat", "completions"),
        default="chat",
        help="stream /v1/chat/completions (default) or /v1/completions",
    )
    p.add_argument(
        "--arm",
        action="append",
        metavar="NAME[=PATCH]",
        help="label of what is measured; repeatable; NAME=JSON gives this arm its own "
        "PATCH /admin/dlfp body. Trials run seed by seed, arms interleaved",
    )
    p.add_argument(
        "--admin-patch",
        help='PATCH /admin/dlfp body for arms without their own, e.g. \'{"controller":"off"}\'',
    )
    add_admin_option(p)
    p.add_argument(
        "--seeds",
        type=_seeds,
        help="one trial per seed (default the paper's 801,802,803)",
    )
    p.add_argument(
        "--metrics-interval-s",
        type=float,
        default=1.0,
        help="poll GET /metrics this often during a trial; 0 = never",
    )
    p.add_argument("--force", action="store_true", help="rerun trials already recorded")
    p.add_argument(
        "--rotate",
        type=int,
        metavar="N",
        help="start the arm order rotated by N (it rotates by one per seed, and per rate in a "
        "sweep); for a run resumed at another rate, so its first arm is not the last run's",
    )
    p.add_argument(
        "--calibrate",
        type=float,
        metavar="FRACTION",
        help="before the first arm, measure a long prompt's prefill alone and shrink the long "
        "prompts so that the offered prefill load is FRACTION of it (calibration.json; reused)",
    )
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument(
        "--study",
        type=Path,
        help="a study file (bench/studies/*.toml): arms, rates, seeds and other options for "
        "the ones not given here",
    )
    p.add_argument("--part", help="which part of the study (needed when it has several)")
    add_results_option(p)
    add_slo_options(p)


def slo_from(args: argparse.Namespace) -> SLO:
    preset = PROTOCOLS[args.protocol]
    return SLO(
        ttft_ms=args.ttft_slo_ms or preset.ttft_slo_ms,
        itl_ms=args.itl_slo_ms or preset.itl_slo_ms,
        itl_percentile=args.itl_slo_percentile,
    )


def _pick(value: T | None, default: T) -> T:
    return default if value is None else value


def arms_from(args: argparse.Namespace) -> tuple[Arm, ...]:
    arms = []
    for spec in args.arm or ["default"]:
        name, sep, patch = spec.partition("=")
        if not _ARM_NAME.match(name):
            raise ValueError(f"arm name {name!r}: use letters, digits, '.', '_' and '-'")
        arms.append(Arm(name, parse_patch(patch if sep else args.admin_patch)))
    return tuple(arms)


def workload_from(args: argparse.Namespace) -> WorkloadConfig:
    preset = PROTOCOLS[args.protocol]
    return WorkloadConfig(
        num_requests=_pick(args.num_requests, preset.num_requests),
        num_warmup=_pick(args.warmup, preset.num_warmup),
        rate_rps=_pick(args.rate, preset.rate_rps),
        long_fraction=_pick(args.long_fraction, WorkloadConfig.long_fraction),
        long_min_tokens=_pick(args.long_min_tokens, WorkloadConfig.long_min_tokens),
        long_max_tokens=_pick(args.long_max_tokens, WorkloadConfig.long_max_tokens),
        short_min_tokens=args.short_min_tokens,
        short_max_tokens=args.short_max_tokens,
    )


async def resolve_model(args: argparse.Namespace) -> str:
    if args.model:
        return str(args.model)
    async with httpx.AsyncClient() as http:
        models = await wait_ready(http, args.base_url, args.api_key, args.ready_timeout_s)
    if not models:
        raise ValueError(f"{args.base_url}/v1/models lists no model; pass --model")
    return models[0]


def client_from(args: argparse.Namespace, model: str) -> ClientSettings:
    extra = json.loads(args.extra_body) if args.extra_body else {}
    return ClientSettings(
        base_url=args.base_url,
        model=model,
        max_tokens=_pick(args.max_tokens, PROTOCOLS[args.protocol].max_tokens),
        endpoint=args.endpoint,
        api_key=args.api_key,
        request_timeout_s=args.request_timeout_s,
        return_token_ids=not args.no_token_ids,
        extra_body=extra,
    )
