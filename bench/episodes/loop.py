"""The run of ``bench episodes``: every (episode, arm) not yet recorded, arms in a balanced order.

Before each arm's run of an episode the gateway must be drained; then the arm's
settings are applied over the gateway's start-up settings (``PATCH /admin/dlfp``)
and the controller is reset (``POST /admin/dlfp/reset``), so that every run starts
from the same controller state. The arm order changes per episode so that every arm
runs in every position and after every other arm (``balanced_order``). A failed run is
run again on resume. When the run ends, or fails, the gateway gets its start-up settings back.

Each run's scheduler steps (``GET /admin/dlfp/steps``, polled while it runs) are kept
beside its record (``steps_path``): what each step carried, what the controller planned
and how long it took. The progress line names the run's longest step with decodes.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.episodes.run import (
    NONCE_CHARS,
    EpisodeRecord,
    EpisodeShape,
    Prompt,
    episode_offsets,
    episode_prompts,
    read_record,
    record_path,
    run_episode,
    steps_path,
    write_record,
    write_steps,
)
from bench.episodes.stats import episode_figures
from bench.lib.client import ClientSettings
from bench.lib.endpoint import (
    EndpointError,
    apply_admin_patch,
    reset_controller,
    set_admission,
    wait_drained,
    wait_ready,
)
from bench.lib.loadgen import Arm
from bench.lib.step_poller import StepPoller
from bench.lib.tokens import TokenCounter

EPISODE_SEED_BASE = 5000
"""Episode e replays the prompts of seed ``EPISODE_SEED_BASE + e``."""
ADMISSION_PATCH: dict[str, Any] = {"no_slack_check": False}
"""Admission's limits for the whole run (``PATCH /admin/admission``, restored at the end):
its ``no_slack`` shedding refuses arrivals only under ``dlfp-ct``, and the arms must serve
the same arrivals to be compared (recorded in the plan; a plan without it ran with the
gateway's admission limits). ``--no-slo-check`` adds ``slo_check`` off to it
(``EpisodeRun.admission_patch``). An arm may add to it for its own runs
(``Arm.admission_patch``, set before each; the plan's ``arm_admission_patches``)."""


@dataclass(frozen=True)
class EpisodeRun:
    results_dir: Path
    client: ClientSettings
    shape: EpisodeShape
    arms: tuple[Arm, ...]
    num_episodes: int
    itl_slo_ms: float
    admin_token: str | None = None
    ready_timeout_s: float = 600.0
    admission_patch: dict[str, Any] = field(default_factory=lambda: dict(ADMISSION_PATCH))
    """Admission's limits for the whole run: ``ADMISSION_PATCH``, with ``slo_check`` off
    where asked (``--no-slo-check``)."""


ORDER = "balanced"
"""How the arm order changes per episode (recorded in the plan; a plan without it was
run with ``rotate``). ``balanced``: a Williams design (``balanced_order``).
``rotate-and-reverse``, the order before: rotated by one per episode and run backwards in
every odd episode, which with an even number of arms repeats the order of the episode
before (two arms never swap; of four, two never run first)."""


def balanced_order(num_arms: int, episode: int) -> list[int]:
    """Row ``episode`` of a Williams design: ``0, 1, n-1, 2, n-2, ...`` shifted by the
    episode, so that over ``n`` episodes every arm runs once in every position and, for an
    even ``n``, follows every other arm once; an odd ``n`` needs the rows run backwards
    too, so every second cycle of ``n`` episodes runs them backwards."""
    base, low, high = [0], 1, num_arms - 1
    while len(base) < num_arms:
        base.append(low)
        low += 1
        if len(base) < num_arms:
            base.append(high)
            high -= 1
    row = [(b + episode) % num_arms for b in base]
    return row[::-1] if num_arms % 2 and (episode // num_arms) % 2 else row


def episode_order(items: tuple[Arm, ...], episode: int, order: str = ORDER) -> tuple[Arm, ...]:
    """The arms of ``episode`` under ``order`` (``ORDER``; a folder keeps the order its
    plan recorded)."""
    if order == ORDER:
        return tuple(items[i] for i in balanced_order(len(items), episode))
    shift = episode % len(items)
    rotated = items[shift:] + items[:shift]
    return rotated[::-1] if order == "rotate-and-reverse" and episode % 2 else rotated


def _check_plan(path: Path, plan: dict[str, Any]) -> dict[str, Any]:
    """A resumed run must send what the recorded one sent, to the same arms (arms added
    later would run hours from the others, unpaired in time); the plan in force."""
    plan = json.loads(json.dumps(plan))  # as the file holds it: lists, not tuples
    if path.exists():
        saved = json.loads(path.read_text(encoding="utf-8"))
        saved.setdefault("order", "rotate")
        saved.setdefault("counter", plan["counter"])
        saved.setdefault("admission_patch", {})
        saved.setdefault("arm_admission_patches", {})
        saved.get("shape", {}).setdefault("offset_jitter_s", 0.0)  # fixed offsets before
        differing = sorted(k for k in plan if k != "order" and saved.get(k) != plan[k])
        if differing:
            raise ValueError(
                f"{path} records another episode plan ({', '.join(differing)} differ): "
                "use another --results folder"
            )
        return dict(saved)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan, indent=2) + "\n", encoding="utf-8")
    return plan


def _progress(done: int, total: int, t0: float, record: EpisodeRecord, summary: str) -> None:
    print(
        f"[episodes] {done}/{total} elapsed {time.perf_counter() - t0:.0f}s | episode "
        f"{record.episode} #{record.position + 1} {record.arm}: {summary}",
        file=sys.stderr,
        flush=True,
    )


def _brief(record: EpisodeRecord, itl_slo_ms: float) -> str:
    if record.error is not None:
        return f"FAILED: {record.error[:160]}"
    f = episode_figures(record, itl_slo_ms)

    def ms(key: str) -> str:
        return "-" if f[key] is None else f"{f[key]:.0f}"

    return (
        f"window {f['window_s']:.1f}s, gap P99/max {ms('window_p99_gap_ms')}/"
        f"{ms('window_max_gap_ms')} ms, TTFT short/long {ms('ttft_short_mean_ms')}/"
        f"{ms('ttft_long_mean_ms')} ms, lone decode {ms('lone_decode_step_ms')} ms"
    )


async def run_episodes(run: EpisodeRun, baseline: dict[str, Any], counter: TokenCounter) -> int:
    """Every (episode, arm) not yet recorded; returns how many ran."""
    plan = {
        "shape": asdict(run.shape),
        "num_episodes": run.num_episodes,
        "itl_slo_ms": run.itl_slo_ms,
        "episode_seed_base": EPISODE_SEED_BASE,
        "arms": {a.name: a.admin_patch for a in run.arms},
        "order": ORDER,
        "admission_patch": run.admission_patch,
        "arm_admission_patches": {a.name: a.admission_patch for a in run.arms if a.admission_patch},
        "counter": counter.name,
        "client": run.client.public() | {"cache_salt": None},
    }
    plan = _check_plan(run.results_dir / "episodes.json", plan)
    total = run.num_episodes * len(run.arms)
    done = ran = 0
    t0 = time.perf_counter()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, timeout=run.client.request_timeout_s) as http:
        restore = await set_admission(
            http, run.client.base_url, run.admission_patch, run.admin_token
        )
        in_force = run.admission_patch
        try:
            for episode in range(run.num_episodes):
                prompts = episode_prompts(run.shape, EPISODE_SEED_BASE + episode, counter)
                offsets = episode_offsets(run.shape, EPISODE_SEED_BASE + episode)
                arms = episode_order(run.arms, episode, str(plan["order"]))
                for position, arm in enumerate(arms):
                    done += 1
                    path = record_path(run.results_dir, episode, arm.name)
                    if path.exists() and read_record(path).error is None:
                        continue  # a failed run is run again
                    wanted = run.admission_patch | (arm.admission_patch or {})
                    if wanted != in_force:
                        await set_admission(http, run.client.base_url, wanted, run.admin_token)
                        in_force = wanted
                    record, steps = await _run_one(
                        http, run, baseline, arm, episode, position, prompts, offsets
                    )
                    write_steps(steps_path(run.results_dir, episode, arm.name), steps)
                    write_record(path, record)
                    ran += 1
                    brief = _brief(record, run.itl_slo_ms) + _steps_brief(steps)
                    _progress(done, total, t0, record, brief)
        finally:
            # Leave the gateway as it was found (without hiding why the run stopped).
            try:
                await apply_admin_patch(http, run.client.base_url, baseline, run.admin_token)
                await reset_controller(http, run.client.base_url, run.admin_token)
                await set_admission(http, run.client.base_url, restore, run.admin_token)
            except EndpointError as exc:
                print(f"[episodes] could not restore the settings: {exc}", file=sys.stderr)
    return ran


async def _run_one(
    http: httpx.AsyncClient,
    run: EpisodeRun,
    baseline: dict[str, Any],
    arm: Arm,
    episode: int,
    position: int,
    prompts: list[Prompt],
    offsets_s: tuple[float, ...],
) -> tuple[EpisodeRecord, list[dict[str, Any]]]:
    """The arm's run of the episode, sending ``prompts`` with the arrivals at
    ``offsets_s``, and the scheduler steps it took."""
    base_url = run.client.base_url
    await wait_ready(http, base_url, run.client.api_key, run.ready_timeout_s)
    await wait_drained(http, base_url)
    patch = baseline | (arm.admin_patch or {})
    await apply_admin_patch(http, base_url, patch, run.admin_token)
    # NOTE: a PATCH that keeps the mode keeps the learned cap and cost model: reset, so
    # that every arm's run starts from the same controller state.
    reset = await reset_controller(http, base_url, run.admin_token)
    record = EpisodeRecord(
        episode=episode,
        arm=arm.name,
        position=position,
        nonce=uuid.uuid4().hex[:NONCE_CHARS],
        admin_patch=arm.admin_patch,
        reset_response=reset.get("state") if isinstance(reset.get("state"), dict) else None,
        started_unix_s=time.time(),
    )
    steps = StepPoller(http, base_url, run.admin_token)
    await steps.start()
    polling = asyncio.create_task(steps.run())
    try:
        record = await run_episode(http, run.client, run.shape, prompts, offsets_s, record)
    finally:
        steps.stop()
        await polling
    return record, steps.steps


def _steps_brief(steps: list[dict[str, Any]]) -> str:
    """The run's longest step with decodes, and what it carried (empty without steps)."""
    mixed = [s for s in steps if s.get("num_decoding") and s.get("observation_ms") is not None]
    if not mixed:
        return ""
    longest = max(mixed, key=lambda s: s["observation_ms"])
    return (
        f", longest step {longest['observation_ms']:.0f} ms "
        f"({longest.get('num_prefill_tokens', 0)} prefill tokens)"
    )
