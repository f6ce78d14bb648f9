"""A scenario's measured window: ``/metrics`` before the load, the load, then ``/metrics``
again once the gateway has released its tenants' slots.

NOTE: ``dlfp_tenant_slot_seconds_total`` grows as each request releases its slots, so the
scrape after the load waits (``SETTLE_TIMEOUT_S`` at most) until
``dlfp_tenant_slots_in_use`` is 0 for the scenario's tenants: the streams the bench cut are
aborted, and their slot-seconds counted, a moment after the client closes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import httpx

from bench.lib.endpoint import bearer
from bench.tenants import metrics as m
from bench.tenants.base import Outcome, Run

SETTLE_TIMEOUT_S = 30.0
SETTLE_POLL_S = 0.25


async def scrape(run: Run) -> str | None:
    """The text of ``/metrics``; None where it is not answered with 200."""
    try:
        response = await run.client.get(
            "/metrics", headers=bearer(run.options.metrics_token), timeout=30.0
        )
    except httpx.HTTPError:
        return None
    return response.text if response.status_code == 200 else None


async def settled_scrape(run: Run, tenants: tuple[str, ...]) -> str | None:
    """``/metrics`` once none of ``tenants`` holds a slot (or after the time-out)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        text = await scrape(run)
        if text is None:
            return None
        in_use = m.by_tenant(m.parse_series(text), m.SLOTS_IN_USE)
        if not any(in_use.get(t, 0.0) > 0 for t in tenants) or time.monotonic() > deadline:
            return text
        await asyncio.sleep(SETTLE_POLL_S)


@contextlib.asynccontextmanager
async def measured(run: Run, outcome: Outcome) -> AsyncIterator[None]:
    """Scrape before the body and after it (settled); the body's duration is the
    outcome's window."""
    outcome.before = await scrape(run)
    start = run.since_start()
    try:
        yield
    finally:
        outcome.window_s = run.since_start() - start
    outcome.after = await settled_scrape(run, outcome.tenants)
