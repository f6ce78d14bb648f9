"""``trickle``: one tenant keeps the queue full, the others send a short request now and
then; each of theirs should be admitted, and soon.

The first ``--tenant`` floods: a closed loop of more streams than it may hold (its
``max_concurrent``, else the gateway's), each asking ``--max-tokens``. After a lead of
``LEAD_S``, every other tenant sends one request of ``--trickle-max-tokens`` every
``--trickle-interval-s`` for ``--duration-s``, whether or not the last one has ended. The
aim: every trickled request admitted, and its wait (the client's TTFT) under
``--trickle-wait-aim-s``.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from typing import Any

from bench.lib.stats import percentile
from bench.tenants.admin import flood_streams, gateway_max_concurrent, known_limits
from bench.tenants.base import Outcome, Run, TenantRecord
from bench.tenants.client import flooding, stream_chat
from bench.tenants.report import tenant_reports
from bench.tenants.window import measured

LEAD_S = 2.0
"""The flood fills its slots and the queue before the first trickled request."""
DEFAULT_SLOTS = 8
"""A flooding tenant's slots where neither it nor the gateway says."""
TRICKLE_PROMPT_WORDS = 12


def judge_trickle(
    records: Sequence[TenantRecord], aim_s: float
) -> tuple[bool, str, dict[str, Any]]:
    """Whether every trickled request was admitted (200) with a first token within
    ``aim_s``; the verdict's line and its figures."""
    trickled = [r for r in records if r.kind == "trickle"]
    admitted = [r for r in trickled if r.status == 200 and r.ttft_s is not None]
    waits = [r.ttft_s for r in admitted if r.ttft_s is not None]
    refused = Counter(r.refusal for r in trickled if r.status != 200)
    worst = max(waits, default=None)
    num_late = sum(w >= aim_s for w in waits)
    met = bool(trickled) and len(admitted) == len(trickled) and num_late == 0
    figures: dict[str, Any] = {
        "num_trickled": len(trickled),
        "num_admitted": len(admitted),
        "num_late": num_late,
        "not_admitted": dict(sorted(refused.items())),
        "wait_s": {
            "p50": _round(percentile(waits, 50)),
            "p95": _round(percentile(waits, 95)),
            "max": _round(worst),
        },
    }
    wait = figures["wait_s"]
    line = (
        f"{len(admitted)}/{len(trickled)} admitted, wait P50 {wait['p50']} s, "
        f"P95 {wait['p95']} s, max {wait['max']} s; {num_late} at or over {aim_s:g} s"
    )
    if refused:
        line += "; not admitted: " + ", ".join(f"{k} x{n}" for k, n in sorted(refused.items()))
    return met, line, figures


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


async def _trickle(run: Run, tenants: Sequence[str]) -> None:
    options = run.options
    tasks: list[asyncio.Task[TenantRecord]] = []
    start_s = run.since_start()
    for num in range(max(1, round(options.duration_s / options.trickle_interval_s))):
        await asyncio.sleep(
            max(0.0, start_s + num * options.trickle_interval_s - run.since_start())
        )
        for tenant in tenants:
            prompt = run.prompt(TRICKLE_PROMPT_WORDS)
            send = stream_chat(run, tenant, "trickle", options.trickle_max_tokens, prompt)
            tasks.append(asyncio.create_task(send))
    await asyncio.gather(*tasks)


async def trickle(run: Run) -> Outcome:
    options = run.options
    names = tuple(t.name for t in options.tenants)
    if len(names) < 2:
        raise ValueError("trickle needs two tenants or more (--tenant twice)")
    flood, others = names[0], names[1:]
    aim_s = options.trickle_wait_aim_s
    outcome = Outcome(
        "trickle",
        names,
        aim=f"every request of {', '.join(others)} admitted, each wait < {aim_s:g} s",
    )
    limits = await known_limits(run, names)
    slots = (limits.get(flood) or {}).get("max_concurrent") or await gateway_max_concurrent(run)
    streams = flood_streams(run, slots or DEFAULT_SLOTS)
    outcome.figures = {
        "flood_tenant": flood,
        "flood_streams": streams,
        "flood_max_tokens": options.max_tokens,
        "trickle_interval_s": options.trickle_interval_s,
        "trickle_max_tokens": options.trickle_max_tokens,
        "limits": limits,
    }
    async with measured(run, outcome), flooding(run, flood, streams, options.max_tokens):
        await asyncio.sleep(LEAD_S)
        await _trickle(run, others)
    outcome.records = list(run.records)
    weights = {n: float(v["weight"]) for n, v in limits.items() if "weight" in v}
    outcome.reports = tenant_reports(outcome, weights or None)
    outcome.met, outcome.verdict, figures = judge_trickle(outcome.records, aim_s)
    outcome.figures |= figures
    return outcome
