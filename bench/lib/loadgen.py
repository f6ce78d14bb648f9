"""The open-loop load generator: one trial per (arm, seed), resumable.

A trial sends its requests on the seed's schedule whether or not earlier ones
have finished (open loop), polls ``/metrics`` beside them, and writes its raw
records in one go when the last request ends. A rerun skips every trial whose
file exists, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import asyncio
import json
import platform
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import httpx

from bench.lib.calibrate import calibrated_workload, write_host
from bench.lib.client import ClientSettings, send_request, server_root
from bench.lib.endpoint import (
    apply_admin_patch,
    get_settings,
    reset_controller,
    wait_drained,
    wait_ready,
)
from bench.lib.records import RequestRecord, Trial, recorded_trial, trial_path, write_trial
from bench.lib.scrape import MetricsPoller
from bench.lib.stats import request_gaps, ttft_s
from bench.lib.step_poller import StepPoller
from bench.lib.tokens import TokenCounter
from bench.lib.workload import RequestSpec, WorkloadConfig, build_workload


@dataclass(frozen=True)
class Arm:
    """A label for what is measured, and the admin switch that selects it (if any)."""

    name: str
    admin_patch: dict[str, Any] | None = None
    admission_patch: dict[str, Any] | None = None
    """``PATCH /admin/admission`` for this arm alone, where a benchmark sets admission
    per arm (``bench episodes``)."""


@dataclass(frozen=True)
class RunConfig:
    results_dir: Path
    arms: tuple[Arm, ...]
    seeds: tuple[int, ...]
    workload: WorkloadConfig
    client: ClientSettings
    admin_token: str | None = None
    metrics_interval_s: float = 1.0
    """0 turns the ``/metrics`` polling off."""
    ready_timeout_s: float = 600.0
    use_cache_salt: bool = True
    force: bool = False
    """Rerun trials that are already recorded."""
    rotation: int = 0
    """The arm order's rotation before the first seed (run_all adds one per seed)."""
    calibrate_fraction: float | None = None
    """Scale the long prompts to this share of the measured prefill throughput."""
    baseline_settings: dict[str, Any] | None = None
    """The server's DLFP settings before the first arm; every arm's patch applies to them."""
    drain_between_trials: bool = False
    """Before each trial, wait until the server holds no request (``wait_drained``)."""
    drain_timeout_s: float = 300.0
    """Give up (``EndpointError``) if the server has not drained by then."""


class Progress:
    """One stderr line per finished request, with the trial's counts and elapsed time."""

    def __init__(self, label: str, total: int, t0: float, out: TextIO = sys.stderr) -> None:
        self.label, self.total, self.t0, self.out = label, total, t0, out
        self.num_ok = self.num_failed = 0

    def done(self, record: RequestRecord) -> None:
        if record.is_ok:
            self.num_ok += 1
        else:
            self.num_failed += 1
        finished = self.num_ok + self.num_failed
        ttft = ttft_s(record)
        gaps = request_gaps(record)
        detail = (
            f"ttft {ttft:.2f}s max-gap {max(gaps, default=0.0):.2f}s"
            if record.is_ok and ttft is not None
            else f"FAILED: {(record.error or '')[:120]}"
        )
        print(
            f"[{self.label}] {finished}/{self.total} ok={self.num_ok} failed={self.num_failed} "
            f"elapsed {time.perf_counter() - self.t0:.0f}s | #{record.index} {record.kind}"
            f"{' warm-up' if record.is_warmup else ''} {detail}",
            file=self.out,
            flush=True,
        )


def _report_to(progress: Progress) -> Callable[[asyncio.Task[RequestRecord]], None]:
    def report(task: asyncio.Task[RequestRecord]) -> None:
        if not task.cancelled() and task.exception() is None:
            progress.done(task.result())

    return report


async def _send_all(
    http: httpx.AsyncClient,
    settings: ClientSettings,
    specs: list[RequestSpec],
    t0: float,
    progress: Progress,
) -> list[RequestRecord]:
    tasks: list[asyncio.Task[RequestRecord]] = []
    for spec in specs:
        delay = t0 + spec.scheduled_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(send_request(http, settings, spec, t0))
        task.add_done_callback(_report_to(progress))
        tasks.append(task)
    return list(await asyncio.gather(*tasks))


async def run_trial(
    http: httpx.AsyncClient,
    run: RunConfig,
    arm: Arm,
    seed: int,
    specs: list[RequestSpec],
    counter_name: str,
) -> Trial:
    """Wait for the endpoint (and its drain, if asked), switch the arm in, send the workload."""
    await wait_ready(http, run.client.base_url, run.client.api_key, run.ready_timeout_s)
    label = f"{arm.name} seed {seed}"
    if run.drain_between_trials:
        # NOTE: before the arm's PATCH and reset, so the controller starts on an empty server.
        waited_s = await wait_drained(http, run.client.base_url, run.drain_timeout_s)
        if waited_s >= 1.0:
            print(f"[{label}] waited {waited_s:.0f} s for the server to drain", file=sys.stderr)
    admin_response = reset_response = None
    steps = StepPoller(http, run.client.base_url, run.admin_token)
    if arm.admin_patch is not None:
        # NOTE: each arm's patch applies to the server's settings at the start of the
        # run, never to the previous arm's: a PATCH leaves the fields it omits as they
        # are, and one arm's settings would otherwise leak into the next.
        patch = (run.baseline_settings or {}) | arm.admin_patch
        admin_response = await apply_admin_patch(http, run.client.base_url, patch, run.admin_token)
        # NOTE: a PATCH that keeps the mode keeps the learned cap and cost model:
        # reset, so that every arm's trial starts from the same controller state.
        reset_response = await reset_controller(http, run.client.base_url, run.admin_token)
        await steps.start()
    salt = f"dlfp-bench-{arm.name}-{seed}-{uuid.uuid4().hex[:12]}" if run.use_cache_salt else None
    settings = replace(run.client, cache_salt=salt)
    print(
        f"[{label}] {len(specs)} requests ({run.workload.num_warmup} warm-up), "
        f"last send at {specs[-1].scheduled_s:.0f}s",
        file=sys.stderr,
        flush=True,
    )
    started_unix_s, t0 = time.time(), time.perf_counter()
    poller = MetricsPoller(
        http, server_root(run.client.base_url) + "/metrics", run.metrics_interval_s, t0
    )
    poll_task = asyncio.create_task(poller.run()) if run.metrics_interval_s > 0 else None
    steps_task = asyncio.create_task(steps.run()) if arm.admin_patch is not None else None
    try:
        records = await _send_all(http, settings, specs, t0, Progress(label, len(specs), t0))
    finally:
        poller.stop()
        steps.stop()
        if poll_task is not None:
            await poll_task
        if steps_task is not None:
            await steps_task
    header = {
        "started_unix_s": started_unix_s,
        "duration_s": time.perf_counter() - t0,
        "workload": asdict(run.workload),
        "client": settings.public(),
        "admin_patch": arm.admin_patch,
        "admin_response": admin_response,
        "reset_response": reset_response,
        "token_counter": counter_name,
        "metrics_available": poller.is_available,
        "client_host": {"python": platform.python_version(), "machine": platform.machine()},
    }
    return Trial(arm.name, seed, header, records, poller.samples, steps.steps)


async def baseline_settings(http: httpx.AsyncClient, run: RunConfig) -> dict[str, Any] | None:
    """The server's settings before any arm, saved beside the results and reused on resume."""
    path = run.results_dir / "baseline-settings.json"
    if path.exists():
        saved: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return saved
    settings = await get_settings(http, run.client.base_url, run.admin_token)
    if settings is not None:
        run.results_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    return settings


def rotated(arms: tuple[Arm, ...], by: int) -> tuple[Arm, ...]:
    shift = by % len(arms) if arms else 0
    return arms[shift:] + arms[:shift]


async def run_all(run: RunConfig, counter: TokenCounter) -> list[Path]:
    """Every (seed, arm) trial not yet recorded, seed by seed (arms interleaved).

    The arm order rotates by one per seed, from ``run.rotation``, so that no arm always runs first
    (on a cold machine) or right after the same neighbour.
    """
    written: list[Path] = []
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, timeout=run.client.request_timeout_s) as http:
        await wait_ready(http, run.client.base_url, run.client.api_key, run.ready_timeout_s)
        await write_host(http, run.client.base_url, run.admin_token, run.results_dir)
        if run.baseline_settings is None and any(a.admin_patch is not None for a in run.arms):
            baseline = await baseline_settings(http, run)
            run = replace(run, baseline_settings=baseline)
        if run.calibrate_fraction is not None:
            workload = await calibrated_workload(
                http, run.client, run.workload, run.calibrate_fraction, run.results_dir, counter
            )
            run = replace(run, workload=workload)
        for seed_index, seed in enumerate(run.seeds):
            specs: list[RequestSpec] | None = None
            for arm in rotated(run.arms, run.rotation + seed_index):
                recorded = recorded_trial(run.results_dir, arm.name, seed)
                if recorded is not None and not run.force:
                    print(
                        f"[{arm.name} seed {seed}] recorded in {recorded}; skipped", file=sys.stderr
                    )
                    continue
                path = trial_path(run.results_dir, arm.name, seed)
                specs = specs or build_workload(run.workload, seed, counter)
                trial = await run_trial(http, run, arm, seed, specs, counter.name)
                write_trial(path, trial)
                if recorded is not None and recorded != path:
                    recorded.unlink()  # a forced rerun replaces an uncompressed record
                written.append(path)
    return written
