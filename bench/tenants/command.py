"""``dlfp-gateway bench tenants``: tenants with different weights and demands on one gateway.

Each ``--tenant NAME=API_KEY`` is a tenant of the gateway's tenants file and one of its
keys. The scenarios (``--scenarios``, in this order by default): ``trickle`` (the first
tenant floods, the others send a short request every 2 s: each should be admitted within
5 s), ``weights`` (every tenant floods, with weights 3 and 1 set through the admin API: the
slot-seconds should follow 3:1 within 10%) and ``token-rate`` (a small tokens_per_minute on
the first tenant: after its 429, a retry after Retry-After should be served). Limits
changed through ``PATCH /admin/tenants`` are put back at the end, even on Ctrl-C.

Per tenant and scenario: its share of slot-seconds and of completion tokens (from the
change of the gateway's per-tenant metrics), requests and tokens per second completed, its
refusals by status and reason, its TTFT P50/P95 as the client saw it, and its queue wait
from the gateway's histogram. One table per scenario on stdout, a progress line every
``--progress-s`` on stderr, ``--out FILE`` as JSON (the raw per-request records, the
per-tenant series of ``/metrics`` before and after, the CPU, the date, the command line).
The status is 1 unless every aim was met.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shlex
import sys
import time
from collections import Counter
from dataclasses import asdict, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.lib.client import server_root
from bench.lib.endpoint import EndpointError, wait_ready
from bench.tenants.admin import AdminError
from bench.tenants.base import SCENARIO_NAMES, Outcome, Run, TenantsOptions, parse_tenant
from bench.tenants.metrics import PREFIX
from bench.tenants.report import format_outcome, verdict_word
from bench.tenants.scenarios import SCENARIOS


def progress_line(name: str, run: Run) -> str:
    counts = {
        t.name: Counter(r.outcome for r in run.records if r.tenant == t.name)
        for t in run.options.tenants
    }
    parts = [
        f"{tenant}: " + ", ".join(f"{n} {what}" for what, n in sorted(c.items()))
        for tenant, c in counts.items()
        if c
    ]
    return f"[tenants {name}] {run.since_start():.0f}s | " + " | ".join(
        parts or ["no requests yet"]
    )


async def _progress(name: str, run: Run) -> None:
    while True:
        await asyncio.sleep(run.options.progress_s)
        print(progress_line(name, run), file=sys.stderr, flush=True)


async def run_scenario(name: str, run: Run) -> Outcome:
    print(f"tenants: {name}: start", file=sys.stderr, flush=True)
    ticker = asyncio.create_task(_progress(name, run))
    try:
        outcome = await SCENARIOS[name](run)
    except (AdminError, ValueError, httpx.HTTPError) as exc:
        names = tuple(t.name for t in run.options.tenants)
        outcome = Outcome(name, names, records=list(run.records), error=str(exc))
    finally:
        ticker.cancel()
    outcome.elapsed_s = run.since_start()
    verdict = "not run" if outcome.error else verdict_word(outcome.met)
    print(f"tenants: {name}: {verdict} in {outcome.elapsed_s:.0f} s", file=sys.stderr, flush=True)
    return outcome


async def run_tenants(options: TenantsOptions) -> tuple[str, list[Outcome]]:
    """Every scenario of ``options.scenarios``, one after the other; the model and outcomes."""
    unknown = [n for n in options.scenarios if n not in SCENARIOS]
    if unknown:
        raise ValueError(f"unknown scenario {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    root = server_root(options.base_url)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    async with httpx.AsyncClient(
        base_url=root, timeout=options.request_timeout_s, limits=limits
    ) as client:
        first_key = options.tenants[0].api_key
        model = options.model or (await wait_ready(client, root, first_key, 30.0) or [""])[0]
        if not model:
            raise EndpointError(f"{root}/v1/models lists no model; pass --model")
        outcomes = []
        for name in options.scenarios:
            run = Run(client, model, options, random.Random(f"{options.seed}-{name}"))
            outcomes.append(await run_scenario(name, run))
    return model, outcomes


def _tenant_lines(text: str | None) -> list[str] | None:
    return None if text is None else [line for line in text.splitlines() if line.startswith(PREFIX)]


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    record = asdict(outcome) | {
        "records": [asdict(r) | {"outcome": r.outcome} for r in outcome.records]
    }
    record["metrics_before"] = _tenant_lines(record.pop("before"))
    record["metrics_after"] = _tenant_lines(record.pop("after"))
    return record


def public_options(options: TenantsOptions) -> dict[str, Any]:
    """The options as recorded: tenants by name, no key or token."""
    public = {f.name: getattr(options, f.name) for f in fields(options)}
    public["tenants"] = [t.name for t in options.tenants]
    del public["admin_token"], public["metrics_token"]
    return public


async def _host(options: TenantsOptions, out: Path) -> dict[str, Any]:
    from bench.lib.calibrate import write_host

    async with httpx.AsyncClient() as client:
        return await write_host(client, options.base_url, options.admin_token, out.parent)


def write_results(out: Path, options: TenantsOptions, model: str, outcomes: list[Outcome]) -> None:
    """``out`` as JSON, and ``host.json`` beside it (``bench.lib.calibrate.write_host``)."""
    result = {
        "command": shlex.join(sys.argv),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": asyncio.run(_host(options, out)),
        "base_url": server_root(options.base_url),
        "model": model,
        "options": public_options(options),
        "met": all(o.met for o in outcomes),
        "scenarios": [outcome_json(o) for o in outcomes],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


def options_from(args: argparse.Namespace) -> TenantsOptions:
    names = tuple(n.strip() for n in args.scenarios.split(",") if n.strip()) or SCENARIO_NAMES
    tenants = tuple(parse_tenant(text) for text in args.tenant or [])
    if not tenants:
        raise ValueError("give each tenant as --tenant NAME=API_KEY")
    weights = tuple(float(w) for w in args.weights.split(","))
    known = {f.name for f in fields(TenantsOptions)}
    given = {k: v for k, v in vars(args).items() if k in known and v is not None}
    return replace(
        TenantsOptions(base_url=args.base_url, tenants=tenants),
        **(given | {"scenarios": names, "tenants": tenants, "weights": weights}),
    )


def main(args: argparse.Namespace) -> int:
    if not args.base_url:
        print("bench tenants: --base-url is required", file=sys.stderr)
        return 2
    try:
        options = options_from(args)
        start = time.monotonic()
        model, outcomes = asyncio.run(run_tenants(options))
    except (EndpointError, ValueError) as exc:
        print(f"bench tenants: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "bench tenants: interrupted; the limits it changed were put back (any it could "
            "not put back are printed above)",
            file=sys.stderr,
        )
        return 130
    print("\n\n".join(format_outcome(o) for o in outcomes))
    print(f"({time.monotonic() - start:.0f} s in all)")
    if args.out is not None:
        write_results(args.out, options, model, outcomes)
        print(f"results: {args.out}")
    return 0 if all(o.met for o in outcomes) else 1


def add_parser(sub: Any) -> None:
    defaults = TenantsOptions(base_url="", tenants=())
    p = sub.add_parser(
        "tenants",
        help="tenants with different weights and demands on one gateway",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--base-url", help="the gateway's root, e.g. http://127.0.0.1:8000")
    p.add_argument(
        "--tenant",
        action="append",
        metavar="NAME=API_KEY",
        help="a tenant of the gateway's tenants file and one of its keys (repeat; the first "
        "floods in trickle and is limited in token-rate)",
    )
    p.add_argument("--admin-token", help="the gateway's /admin/* bearer token")
    p.add_argument("--metrics-token", help="the bearer token of /metrics, if it has one")
    p.add_argument("--model", help="model name to send (default: the first of /v1/models)")
    p.add_argument(
        "--scenarios",
        default=",".join(SCENARIO_NAMES),
        help=f"comma-separated, in this order by default: {','.join(SCENARIO_NAMES)}",
    )
    p.add_argument("--weights", default="3,1", help="weights: one per --tenant, in order (3,1)")
    for name, kind, what in (
        ("duration_s", float, "seconds of load of trickle and weights"),
        ("streams", int, "streams of a flooding tenant (default: 1.5x the slots it may hold)"),
        ("max_tokens", int, "tokens a flooding request asks for"),
        ("trickle_interval_s", float, "seconds between a trickling tenant's requests"),
        ("trickle_max_tokens", int, "tokens a trickled request asks for"),
        ("trickle_wait_aim_s", float, "most wait (client TTFT) of a trickled request"),
        ("weight_tolerance", float, "relative error allowed in the slot-seconds ratio"),
        ("tokens_per_minute", int, "the tokens_per_minute token-rate sets"),
        ("rate_max_tokens", int, "tokens each token-rate request asks for"),
        ("max_rate_requests", int, "token-rate gives up after this many without a 429"),
        ("request_timeout_s", float, "time-out of one request"),
        ("progress_s", float, "seconds between progress lines"),
        ("seed", int, "seed of the prompts"),
    ):
        default = getattr(defaults, name)
        flag = f"--{name.replace('_', '-')}"
        shown = "" if default is None else f" ({default:g})"
        p.add_argument(flag, type=kind, default=default, help=what + shown)
    p.add_argument("--out", type=Path, help="write the outcomes and raw records as JSON")
    p.set_defaults(handler=main)
