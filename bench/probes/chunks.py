"""``bench chunks``: what a prefill chunk costs beside a decode, by chunk size and context.

On a running gateway (our scheduler, admin token), for each chunk size C:
the ``fixed`` controller at cap C, the controller reset, one stream decoding,
then one long prompt (distinct, so no prefix-cache hit) prefilled in chunks of
C beside it. The scheduler's own step telemetry then gives every mixed step's
busy time and the context its chunk attended to. The table bins the context
(the chunk's start) and reports the median busy time per bin: a cost curve on
the real engine, one chunk size at a time, with nothing else running.

    dlfp-gateway bench chunks --base-url http://127.0.0.1:8000 --admin-token T \\
        --tokenizer DIR --chunks 32,64,128,256 --prompt-tokens 2000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench.lib.client import server_root
from bench.lib.endpoint import apply_admin_patch, bearer, reset_controller, wait_ready
from bench.lib.tokens import load_counter
from bench.lib.workload import make_prompt
from engine_worker.controller.step_timing import logged_prefill_start

CONTEXT_BIN_TOKENS = 512


async def _stream(
    http: httpx.AsyncClient, url: str, body: dict[str, Any], first: asyncio.Event
) -> None:
    async with http.stream("POST", url, json=body, timeout=900.0) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data: ") and '"text"' in line and not first.is_set():
                first.set()


async def measure_chunk(
    http: httpx.AsyncClient, args: argparse.Namespace, chunk: int, prompt: str
) -> list[dict[str, Any]]:
    """The mixed steps of one long prefill at ``chunk`` tokens a step, beside one decode."""
    root = server_root(args.base_url)
    await apply_admin_patch(
        http, args.base_url, {"controller": "fixed", "fixed_cap_tokens": chunk}, args.admin_token
    )
    await reset_controller(http, args.base_url, args.admin_token)
    steps_url = root + "/admin/dlfp/steps"
    start = (await http.get(steps_url, headers=bearer(args.admin_token))).json()["next"]
    url, salt = root + "/v1/completions", uuid.uuid4().hex
    decoding, prefilled = asyncio.Event(), asyncio.Event()
    decode = asyncio.create_task(
        _stream(
            http,
            url,
            {
                "model": args.model,
                "prompt": f"[{salt}] Tell a long story.",
                "max_tokens": 4000,
                "ignore_eos": True,
                "stream": True,
                "temperature": 0,
            },
            decoding,
        )
    )
    await asyncio.wait_for(decoding.wait(), 600)
    body = {"model": args.model, "prompt": f"[{salt}]\n{prompt}", "max_tokens": 1, "stream": True}
    await _stream(http, url, body, prefilled)
    decode.cancel()
    await asyncio.gather(decode, return_exceptions=True)
    steps: list[dict[str, Any]] = []
    since = start
    while True:
        page = (
            await http.get(steps_url, params={"since": since}, headers=bearer(args.admin_token))
        ).json()
        steps += page["steps"]
        if not page["steps"]:
            break
        since = page["next"]
    return [s for s in steps if s.get("is_mixed") and s["num_prefill_tokens"] == chunk]


def table(steps_by_chunk: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = []
    for chunk, steps in steps_by_chunk.items():
        bins: dict[int, list[float]] = {}
        for s in steps:
            start = logged_prefill_start(s)
            bins.setdefault(start // CONTEXT_BIN_TOKENS * CONTEXT_BIN_TOKENS, []).append(
                s["busy_ms"]
            )
        for low, busy in sorted(bins.items()):
            rows.append(
                {
                    "chunk_tokens": chunk,
                    "context_from": low,
                    "context_to": low + CONTEXT_BIN_TOKENS,
                    "steps": len(busy),
                    "median_busy_ms": statistics.median(busy),
                }
            )
    return rows


async def run(args: argparse.Namespace) -> int:
    counter = load_counter(args.tokenizer)
    async with httpx.AsyncClient(timeout=900.0) as http:
        models = await wait_ready(http, args.base_url, None, 600.0)
        args.model = args.model or models[0]
        steps_by_chunk = {}
        for number, chunk in enumerate(args.chunks):
            prompt, _ = make_prompt(
                901, number, "long", args.prompt_tokens, args.prompt_tokens + 50, counter
            )
            print(f"[chunks] {chunk} tokens a step ...", file=sys.stderr, flush=True)
            steps_by_chunk[chunk] = await measure_chunk(http, args, chunk, prompt)
        await apply_admin_patch(http, args.base_url, {"controller": "dlfp-ct"}, args.admin_token)
    rows = table(steps_by_chunk)
    args.results.mkdir(parents=True, exist_ok=True)
    out = {
        "prompt_tokens": args.prompt_tokens,
        "rows": rows,
        "steps": {str(c): s for c, s in steps_by_chunk.items()},
    }
    (args.results / "chunks.json").write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print("chunk | context      | steps | median busy ms")
    for r in rows:
        print(
            f"{r['chunk_tokens']:5d} | {r['context_from']:5d}-{r['context_to']:<5d} | "
            f"{r['steps']:5d} | {r['median_busy_ms']:8.0f}"
        )
    from bench.lib.plots import chunk_costs

    print(f"plot: {chunk_costs(rows, args.results / 'chunk-cost.png')}")
    return 0


def handler(args: argparse.Namespace) -> int:
    return asyncio.run(run(args))


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "chunks",
        help="cost of a prefill chunk beside a decode, by size and context",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--base-url", required=True)
    p.add_argument("--admin-token")
    p.add_argument("--model")
    p.add_argument("--tokenizer", help="tokenizer directory (default ~4 characters a token)")
    p.add_argument(
        "--chunks", type=lambda t: [int(c) for c in t.split(",")], default=[32, 64, 128, 256]
    )
    p.add_argument("--prompt-tokens", type=int, default=2000)
    p.add_argument("--results", type=Path, default=Path("bench/results/chunks"))
    p.set_defaults(handler=handler)
