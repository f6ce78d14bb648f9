"""One arm's run of one seed of ``bench tiers``, and the file that records it.

Before the run the gateway is drained, the arm's settings are applied over the run's
settings (``PATCH /admin/dlfp``) and the controller is reset. Every request is sent at
its time with its tier's objectives in the body (``ttft_slo_ms``, ``itl_slo_ms``), its
prompt opened by the arm's nonce (no prefix-cache hit from another arm). At the end of
the last phase plus the tail, every request still streaming is cut (the gateway aborts
it) and counts as a miss.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from bench.episodes.run import NONCE_CHARS, with_nonce
from bench.lib.client import ClientSettings, new_record, stream_into
from bench.lib.endpoint import apply_admin_patch, reset_controller, wait_drained
from bench.lib.records import RequestRecord, open_text, write_json
from bench.lib.workload import RequestSpec
from bench.tiers.workload import TierPlan, TierRequest

CUT = "cut at the end of the run's tail"


@dataclass
class TierRun:
    """What one arm's run of one seed recorded; times in seconds from its start."""

    seed: int
    arm: str
    position: int
    """Where the arm ran among the seed's arms (0 = first)."""
    nonce: str
    admin_patch: dict[str, Any]
    started_unix_s: float
    tiers: list[str] = field(default_factory=list)
    phases: list[str] = field(default_factory=list)
    """Each request's tier and phase, in the order of ``requests``."""
    requests: list[RequestRecord] = field(default_factory=list)
    cut_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        obj = asdict(self)
        for r in obj["requests"]:
            r |= {"prompt": "", "text": "", "token_ids": None}  # the seed regenerates them
        return obj

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TierRun:
        obj = dict(obj)
        obj["requests"] = [RequestRecord(**r) for r in obj["requests"]]
        return cls(**obj)


def run_path(results_dir: Path, seed: int, arm: str) -> Path:
    return results_dir / "records" / f"seed-{seed}" / f"{arm}.json.gz"


def write_run(path: Path, run: TierRun) -> None:
    write_json(path, run.to_json())


def read_run(path: Path) -> TierRun:
    with open_text(path) as f:
        return TierRun.from_json(json.load(f))


def read_runs(results_dir: Path) -> dict[int, dict[str, TierRun]]:
    """Every recorded run, by seed and then arm."""
    found: dict[int, dict[str, TierRun]] = {}
    for path in sorted((results_dir / "records").glob("seed-*/*.json.gz")):
        run = read_run(path)
        found.setdefault(run.seed, {})[run.arm] = run
    return found


def tier_clients(client: ClientSettings, plan: TierPlan) -> dict[str, ClientSettings]:
    """How each tier's requests are sent: its output length and its own objectives."""
    return {
        t.name: replace(
            client,
            max_tokens=t.max_tokens,
            extra_body=client.extra_body
            | {"ttft_slo_ms": t.ttft_slo_ms, "itl_slo_ms": t.itl_slo_ms},
        )
        for t in plan.tiers
    }


async def _send_at(
    http: httpx.AsyncClient, client: ClientSettings, record: RequestRecord, t0: float
) -> RequestRecord:
    await asyncio.sleep(max(0.0, t0 + record.scheduled_s - time.perf_counter()))
    return await stream_into(http, client, record, t0)


async def run_arm(
    http: httpx.AsyncClient,
    client: ClientSettings,
    plan: TierPlan,
    requests: list[TierRequest],
    patch: dict[str, Any],
    run: TierRun,
    admin_token: str | None,
) -> TierRun:
    """Switch the arm in (``patch`` over the run's settings), reset, send every request
    at its time, and cut what is unfinished after the tail; fills ``run``."""
    await wait_drained(http, client.base_url)
    await apply_admin_patch(http, client.base_url, patch, admin_token)
    await reset_controller(http, client.base_url, admin_token)
    clients = tier_clients(client, plan)
    run.tiers = [r.tier for r in requests]
    run.phases = [r.phase for r in requests]
    run.requests = [
        new_record(
            RequestSpec(
                r.index,
                r.tier,
                False,
                r.send_s,
                with_nonce(run.nonce, r.prompt),
                r.num_prompt_tokens,
            ),
            clients[r.tier].max_tokens,
        )
        for r in requests
    ]
    t0 = time.perf_counter()
    tasks = [
        asyncio.create_task(_send_at(http, clients[record.kind], record, t0))
        for record in run.requests
    ]
    end = t0 + plan.duration_s + plan.tail_s
    _, pending = await asyncio.wait(tasks, timeout=max(0.0, end - time.perf_counter()))
    run.cut_s = time.perf_counter() - t0
    for task in pending:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for record in run.requests:
        if record.status == "pending":
            record.fail(CUT)
    return run


def new_run(seed: int, arm: str, position: int, patch: dict[str, Any]) -> TierRun:
    return TierRun(
        seed=seed,
        arm=arm,
        position=position,
        nonce=uuid.uuid4().hex[:NONCE_CHARS],
        admin_patch=patch,
        started_unix_s=time.time(),
    )
