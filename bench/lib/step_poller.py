"""Polling the scheduler's per-step telemetry (``GET /admin/dlfp/steps``) during a trial.

The engine keeps the last few thousand steps in a ring buffer; polling every
few seconds with ``since`` keeps every step of a trial, which the cost-model
plot (predicted against observed busy time) and later re-analyses read from
the trial's raw records. An endpoint without the route (vLLM's own server)
gives up on the first refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx

from bench.lib.client import server_root
from bench.lib.endpoint import bearer


class StepPoller:
    """Collects ``/admin/dlfp/steps`` from the step index at start until stopped."""

    def __init__(
        self, client: httpx.AsyncClient, base_url: str, token: str | None, interval_s: float = 2.0
    ) -> None:
        self.client, self.interval_s = client, interval_s
        self.url = server_root(base_url) + "/admin/dlfp/steps"
        self.headers = bearer(token)
        self.steps: list[dict[str, Any]] = []
        self._next: int | None = None
        self._stop = asyncio.Event()

    async def start(self) -> None:
        """Skip the steps before the trial: the first poll only learns where they end."""
        await self.poll(keep=False)

    async def poll(self, keep: bool = True) -> None:
        params = {"since": self._next or 0}
        try:
            response = await self.client.get(self.url, params=params, headers=self.headers)
        except httpx.HTTPError:
            return  # a busy server may miss one poll
        if response.status_code != 200:
            self._stop.set()
            return
        body = response.json()
        if keep:
            self.steps += body.get("steps", [])
        self._next = int(body.get("next", self._next or 0))

    async def run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval_s)
            await self.poll()

    def stop(self) -> None:
        self._stop.set()
