"""``dlfp-gateway bench abuse``: bounded abuse scenarios against a gateway on loopback.

Each scenario sends a bounded number of hostile or oversized requests to a running
gateway and judges what came back: ``burst`` (many streams at once), ``surrogate-stop``
(a lone surrogate as a stop string, and the memory it costs), ``stalled-readers``
(streams nobody reads), ``reply-too-big``, ``deep-schema``, ``pre-admission`` (large
bodies before admission), and ``list-bodies``, ``idle-sockets``, ``space-free-prompts``
and ``distinct-schemas``, where one client tries to take the gateway from another
(``bench/abuse/hostile.py``), and ``cold-burst`` and ``slow-readers``, which test what
the SLO check knows (``bench/abuse/cold.py``). One table on stdout, ``--results FILE``
as JSON, progress on stderr; the status is 1 if any scenario failed. Only a loopback
gateway is accepted: these requests are meant to hurt the server they reach.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import httpx

from bench.abuse.base import (
    SCENARIO_NAMES,
    AbuseOptions,
    Outcome,
    Scenario,
    Target,
    check_loopback,
)
from bench.abuse.scenarios import SCENARIOS
from bench.lib.endpoint import EndpointError, bearer, wait_ready


async def run_scenario(name: str, scenario: Scenario, target: Target) -> Outcome:
    print(f"abuse: {name}: start", file=sys.stderr, flush=True)
    start = time.monotonic()
    timeout_s = target.options.scenario_timeout_s
    try:
        outcome = await asyncio.wait_for(scenario(target), timeout_s)
    except TimeoutError:
        outcome = Outcome(name, failures=[f"did not finish within {timeout_s:g} s"])
    except (httpx.HTTPError, OSError) as exc:
        outcome = Outcome(name, failures=[f"{type(exc).__name__}: {exc}"])
    outcome.elapsed_s = time.monotonic() - start
    verdict = "PASS" if outcome.passed else "FAIL"
    print(f"abuse: {name}: {verdict} in {outcome.elapsed_s:.1f} s", file=sys.stderr, flush=True)
    return outcome


async def run_abuse(options: AbuseOptions) -> list[Outcome]:
    """Every scenario of ``options.scenarios``, one after the other."""
    root = check_loopback(options.base_url)
    unknown = [name for name in options.scenarios if name not in SCENARIOS]
    if unknown:
        raise ValueError(f"unknown scenario {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    async with httpx.AsyncClient(
        base_url=root,
        timeout=options.request_timeout_s,
        limits=limits,
        headers=bearer(options.api_key),
    ) as client:
        model = options.model or (await wait_ready(client, root, options.api_key, 30.0) or [""])[0]
        if not model:
            raise EndpointError(f"{root}/v1/models lists no model; pass --model")
        target = Target(client, model, replace(options, base_url=root))
        outcomes = []
        for name in options.scenarios:
            target.rng = random.Random(f"{options.seed}-{name}")
            outcomes.append(await run_scenario(name, SCENARIOS[name], target))
    return outcomes


def _figure(value: Any) -> str:
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
    if isinstance(value, dict):
        return " ".join(f"{k}:{_figure(v)}" for k, v in value.items()) or "-"
    return "-" if value is None else str(value)


def format_table(outcomes: list[Outcome], width: int = 100) -> str:
    """One row per scenario: its name, PASS or FAIL, and its figures wrapped below."""
    lines = [f"{'scenario':<16} {'result':<6} figures", f"{'-' * 16} {'-' * 6} {'-' * 40}"]
    for outcome in outcomes:
        items = [f"{k}={_figure(v)}" for k, v in outcome.figures.items()]
        items += [f"FAILED: {c}" for c in outcome.failures]
        items += [f"not measured: {c}" for c in outcome.not_measured]
        rows: list[str] = []
        for item in items or ["-"]:
            if rows and len(rows[-1]) + 2 + len(item) <= width - 24 and ": " not in item:
                rows[-1] += f"  {item}"
            else:
                rows.append(item)
        verdict = "PASS" if outcome.passed else "FAIL"
        lines.append(f"{outcome.scenario:<16} {verdict:<6} {rows[0]}")
        lines.extend(f"{'':<23} {row}" for row in rows[1:])
    return "\n".join(lines)


def outcomes_json(options: AbuseOptions, outcomes: list[Outcome]) -> dict[str, Any]:
    return {
        "base_url": options.base_url,
        "passed": all(o.passed for o in outcomes),
        "scenarios": [asdict(o) | {"passed": o.passed} for o in outcomes],
    }


def options_from(args: argparse.Namespace) -> AbuseOptions:
    names = tuple(n.strip() for n in args.scenarios.split(",") if n.strip())
    fields = {k: getattr(args, k) for k in AbuseOptions.__dataclass_fields__ if hasattr(args, k)}
    return AbuseOptions(**(fields | {"scenarios": names or SCENARIO_NAMES}))


def main(args: argparse.Namespace) -> int:
    if not args.base_url:
        print("bench abuse: --base-url is required", file=sys.stderr)
        return 2
    options = options_from(args)
    try:
        outcomes = asyncio.run(run_abuse(options))
    except (EndpointError, ValueError) as exc:
        print(f"bench abuse: {exc}", file=sys.stderr)
        return 2
    print(format_table(outcomes))
    if args.results is not None:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(outcomes_json(options, outcomes), indent=2) + "\n"
        args.results.write_text(text, encoding="utf-8")
        print(f"results: {args.results}")
    return 0 if all(o.passed for o in outcomes) else 1


def add_parser(sub: Any) -> None:
    defaults = AbuseOptions(base_url="")
    p = sub.add_parser(
        "abuse",
        help="bounded abuse scenarios against a gateway on loopback",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--base-url", help="gateway root on loopback, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", help="model name to send (default: the first of /v1/models)")
    p.add_argument(
        "--api-key",
        default=os.environ.get("OPENAI_API_KEY"),
        help="bearer key for /v1/* [env OPENAI_API_KEY]",
    )
    p.add_argument("--admin-token", help="the gateway's /admin/* bearer token (optional)")
    p.add_argument(
        "--scenarios",
        default=",".join(SCENARIO_NAMES),
        help=f"comma-separated, in this order by default: {','.join(SCENARIO_NAMES)}",
    )
    for name, what in (
        ("num_burst", "streams sent at once by burst"),
        ("num_surrogate", "requests of surrogate-stop (and as many baseline ones)"),
        ("num_stalled", "clients of stalled-readers that never read"),
        ("num_pre_admission", "large-prompt requests of pre-admission"),
        ("num_list_bodies", "1 MiB list-shaped bodies of list-bodies"),
        ("num_idle_sockets", "connections of idle-sockets that send nothing"),
        ("num_space_free", "400 KB prompts without a space of space-free-prompts"),
        ("num_schemas", "requests with distinct JSON schemas of distinct-schemas"),
        ("num_cold_burst", "streams sent at once by cold-burst, to a fresh gateway"),
        ("num_slow", "Responses streams of slow-readers that nobody reads"),
    ):
        default = getattr(defaults, name)
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=default, help=what)
    for name, what in (
        ("ttft_slo_ms", "TTFT SLO of burst when GET /admin/dlfp does not give the gateway's"),
        ("stream_write_timeout_s", "the gateway's stream_write_timeout_s"),
        ("slow_hold_s", "seconds slow-readers' streams go unread"),
        ("max_rss_growth_mb", "most RSS surrogate-stop may add beyond its baseline batch"),
        ("request_timeout_s", "time-out of one request"),
        ("scenario_timeout_s", "time-out of one scenario"),
    ):
        default = getattr(defaults, name)
        p.add_argument(f"--{name.replace('_', '-')}", type=float, default=default, help=what)
    p.add_argument("--seed", type=int, default=defaults.seed, help="seed of the filler text")
    p.add_argument("--results", type=Path, help="write the outcomes (and raw records) as JSON")
    p.set_defaults(handler=main)
