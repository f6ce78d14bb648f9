"""``weights``: every tenant floods at once, with the weights of ``--weights`` set through
``PATCH /admin/tenants/{name}``; the slots should be shared in their ratio.

Each tenant runs a closed loop of more streams than the gateway's ``max_concurrent``, so
each always has requests queued and the fair queue decides every slot, for
``--duration-s``. The aim: each tenant's slot-seconds (the change of
``dlfp_tenant_slot_seconds_total``) over the lowest-weighted tenant's within
``--weight-tolerance`` of the ratio of their weights (3:1 by default). The earlier weights
are put back at the end, however the scenario ends.

NOTE: a tenant's ``max_concurrent`` below its weighted share of the slots caps it there;
the outcome's figures carry every tenant's limits so that a miss can be read against them.
"""

from __future__ import annotations

import asyncio
import contextlib

from bench.tenants.admin import flood_streams, gateway_max_concurrent, patched, tenant_limits
from bench.tenants.base import Outcome, Run
from bench.tenants.client import flooding
from bench.tenants.report import tenant_reports, weight_ratios
from bench.tenants.window import measured

DEFAULT_SLOTS = 32
"""The gateway's ``max_concurrent`` where ``GET /admin/admission`` does not say."""


def _ratio_text(weights: dict[str, float]) -> str:
    return ":".join(f"{w:g}" for w in weights.values())


async def weights(run: Run) -> Outcome:
    options = run.options
    names = tuple(t.name for t in options.tenants)
    if len(names) < 2:
        raise ValueError("weights needs two tenants or more (--tenant twice)")
    if len(options.weights) != len(names):
        raise ValueError(f"--weights: one weight per --tenant ({len(names)}), in their order")
    by_name = dict(zip(names, options.weights, strict=True))
    tolerance = options.weight_tolerance
    outcome = Outcome(
        "weights",
        names,
        aim=f"slot-seconds ratio within {tolerance:.0%} of {_ratio_text(by_name)}",
    )
    limits = await tenant_limits(run, names)
    slots = await gateway_max_concurrent(run) or DEFAULT_SLOTS
    streams = flood_streams(run, slots)
    outcome.figures = {
        "weights": by_name,
        "streams_per_tenant": streams,
        "max_tokens": options.max_tokens,
        "gateway_max_concurrent": slots,
        "limits_before": limits,
    }
    changes = {n: {"weight": w} for n, w in by_name.items()}
    async with (
        patched(run, changes),
        measured(run, outcome),
        contextlib.AsyncExitStack() as floods,
    ):
        for name in names:
            await floods.enter_async_context(flooding(run, name, streams, options.max_tokens))
        await asyncio.sleep(options.duration_s)
    outcome.records = list(run.records)
    outcome.reports = tenant_reports(outcome, by_name)
    slot_s = {r["tenant"]: r["slot_seconds"] for r in outcome.reports}
    ratios, outcome.met = weight_ratios(slot_s, by_name, tolerance)
    outcome.figures["slot_seconds_ratio"] = ratios
    reference = min(by_name, key=lambda t: by_name[t])
    outcome.verdict = (
        ", ".join(
            f"{t}/{reference} {'-' if r is None else f'{r:.2f}'} "
            f"(aim {by_name[t] / by_name[reference]:g})"
            for t, r in ratios.items()
        )
        if ratios
        else "no ratio"
    )
    return outcome
