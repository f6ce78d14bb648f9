"""Polling the server's Prometheus ``/metrics`` during a trial.

The gateway's controller exports its cap and its latest observation; vLLM
exports prefix-cache counters (a hit count that grows during a trial means some
prompts were served from cache). An endpoint without some series, or without
``/metrics`` at all, is fine: the samples simply lack them.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time

import httpx

from bench.lib.records import MetricsSample

CAP = "dlfp_controller_cap_tokens"
OBSERVATION = "dlfp_controller_observation_seconds"
TARGET = "dlfp_controller_target_seconds"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
TRACKED = (
    CAP,
    OBSERVATION,
    TARGET,
    PREFIX_HITS,
    PREFIX_QUERIES,
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
)


def parse_exposition(text: str, names: tuple[str, ...] = TRACKED) -> dict[str, float]:
    """The tracked series of a Prometheus text exposition, summed over their label sets."""
    values: dict[str, float] = {}
    wanted = set(names)
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        cut = [i for i in (line.find("{"), line.find(" ")) if i >= 0]
        if not cut or line[: min(cut)] not in wanted:
            continue
        name = line[: min(cut)]
        rest = line[line.rfind("}") + 1 :] if line[len(name)] == "{" else line[len(name) :]
        try:
            value = float(rest.split()[0])
        except (IndexError, ValueError):
            continue
        if not math.isnan(value):
            values[name] = values.get(name, 0.0) + value
    return values


class MetricsPoller:
    """Scrapes ``url`` every ``interval_s`` until stopped; gives up on the first non-200."""

    def __init__(self, client: httpx.AsyncClient, url: str, interval_s: float, t0: float) -> None:
        self.client, self.url, self.interval_s, self.t0 = client, url, interval_s, t0
        self.samples: list[MetricsSample] = []
        self.is_available: bool | None = None
        self._stop = asyncio.Event()

    async def scrape(self) -> None:
        try:
            response = await self.client.get(self.url, timeout=10.0)
        except httpx.HTTPError:
            return  # a busy server may miss one scrape
        if response.status_code != 200:
            self.is_available = False
            self._stop.set()
            return
        self.is_available = True
        values = parse_exposition(response.text)
        if values:
            self.samples.append(MetricsSample(time.perf_counter() - self.t0, values))

    async def run(self) -> None:
        while not self._stop.is_set():
            await self.scrape()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval_s)

    def stop(self) -> None:
        self._stop.set()
